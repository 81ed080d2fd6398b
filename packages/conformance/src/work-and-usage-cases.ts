import {
  type CordonSandbox,
  type MeasuredUsageField,
  SandboxControlRefusedError,
} from '@cordon/core'
import { describe, expect, it } from 'vitest'
import type { SandboxesUnderTest } from './shared-sandbox.js'
import type { SandboxConformanceOptions } from './suite-options.js'

async function endReasonOf(sandbox: CordonSandbox, timeoutMs: number) {
  const deadline = Date.now() + timeoutMs
  while (sandbox.endReason === undefined && Date.now() < deadline)
    await new Promise((resolve) => setTimeout(resolve, 50))
  return sandbox.endReason
}

/** Every field a backend may measure; each one it does not declare must be absent. */
const USAGE_FIELDS: readonly MeasuredUsageField[] = [
  'cpuTimeMs',
  'memoryBytes',
  'memoryPeakBytes',
  'processes',
  'diskBytes',
]

/** Lifetime that follows work, end reasons, usage and terminals. */
export function workAndUsageCases(
  options: SandboxConformanceOptions,
  sandboxes: SandboxesUnderTest,
): void {
  const timeout = options.timeoutMs ?? 60_000

  describe('work, usage and terminals', () => {
    it(
      'reaps an idle sandbox after its idle timeout, never while a command runs, and says why',
      async () => {
        const sandbox = await sandboxes.provider.create({ idleTimeoutMs: 1_000 })
        try {
          expect((await sandbox.exec('sleep', ['2'])).exitCode).toBe(0)
          expect(sandbox.endReason).toBeUndefined()
          expect(await endReasonOf(sandbox, 10_000)).toBe('idle')
          expect(sandbox.status).toBe('destroyed')
        } finally {
          await sandbox.destroy()
        }
      },
      timeout,
    )

    it(
      'records destroyed when the host destroys it',
      async () => {
        const sandbox = await sandboxes.provider.create()
        expect(sandbox.endReason).toBeUndefined()
        await sandbox.destroy()
        expect(sandbox.endReason).toBe('destroyed')
      },
      timeout,
    )

    it(
      'stats reports every usage field the backend declares as a number, and none it does not',
      async () => {
        const { measuredUsage } = sandboxes.declared
        await sandboxes.withFresh({}, async (sandbox) => {
          const before = await sandbox.stats()
          await sandbox.writeFile('usage-probe.bin', new Uint8Array(100_000))
          const sleeper = await sandbox.start('sleep', ['30'])
          try {
            const usage = await sandbox.stats()
            for (const field of USAGE_FIELDS) {
              if (measuredUsage.includes(field)) {
                expect(typeof usage[field], `${field} is declared measured`).toBe('number')
                expect(Number.isFinite(usage[field]), `${field} is a real number`).toBe(true)
                expect(usage[field], `${field} is a real number`).toBeGreaterThanOrEqual(0)
              } else expect(usage[field], `${field} is not claimed`).toBeUndefined()
            }
            if (measuredUsage.includes('diskBytes')) {
              // What the file takes on the disk: its size, in whole blocks of the filesystem.
              const grew = usage.diskBytes! - (before.diskBytes ?? 0)
              expect(grew).toBeGreaterThanOrEqual(100_000)
              expect(grew).toBeLessThan(100_000 + 65_536)
            }
            if (measuredUsage.includes('processes'))
              expect(usage.processes).toBeGreaterThanOrEqual(1)
            expect(usage.measuredAt).toBeGreaterThan(0)
            expect(usage.egressBytesOut).toBeGreaterThanOrEqual(0)
          } finally {
            await sleeper.kill('SIGKILL')
          }
        })
      },
      timeout,
    )

    it(
      'terminal declared: openTerminal runs a program on a terminal; declared false: refused with a typed error naming it',
      async () => {
        const { terminal } = sandboxes.declared
        const sandbox = sandboxes.sandbox
        const opening = sandbox.openTerminal({
          command: 'sh',
          args: ['-c', '[ -t 0 ] && echo tty; read line; echo "got $line"'],
          size: { cols: 80, rows: 24 },
        })
        if (!terminal) {
          const error = await opening.then(
            async (session) => {
              await session.kill('SIGKILL')
              return undefined
            },
            (caught: unknown) => caught,
          )
          expect(SandboxControlRefusedError.isInstance(error), 'openTerminal is refused').toBe(true)
          expect(error).toMatchObject({
            control: 'openTerminal',
            backend: sandboxes.provider.backend,
          })
          return
        }
        const session = await opening
        let shown = ''
        session.onData((data) => {
          shown += Buffer.from(data).toString()
        })
        await session.write('hello\r')
        expect(await session.exited).toBe(0)
        expect(shown).toContain('tty')
        expect(shown).toContain('got hello')
      },
      timeout,
    )
  })
}
