import { SandboxControlRefusedError, SandboxPausedError } from '@cordon/core'
import { describe, expect, it } from 'vitest'
import type { SandboxesUnderTest } from './shared-sandbox.js'
import type { SandboxConformanceOptions } from './suite-options.js'

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms))

/** How long the case keeps the sandbox paused. */
const PAUSED_MS = 4_000

/** A loop that counts in a file of the working directory, as fast as it can, the count always whole. */
const COUNTER_LOOP = [
  '-c',
  'i=0; while :; do i=$((i+1)); echo $i > counter.new; mv counter.new counter; done',
]

/** Pause and resume: proved where declared, checked as a refusal where not. */
export function pauseCases(options: SandboxConformanceOptions, sandboxes: SandboxesUnderTest) {
  const timeout = options.timeoutMs ?? 60_000

  describe('pause and resume', () => {
    it(
      'pause declared: pause freezes every process (a counting loop stops), refuses commands and files while paused, resume goes on, and a paused sandbox is destroyed like any other; declared false: pause and resume are refused with a typed error naming the control and the backend',
      async () => {
        if (!sandboxes.declared.pause) {
          const sandbox = sandboxes.sandbox
          // Both are called before any check, so a backend that does pause is resumed.
          const outcomes = [
            ['pause', await sandbox.pause().catch((caught: unknown) => caught)],
            ['resume', await sandbox.resume().catch((caught: unknown) => caught)],
          ] as const
          for (const [control, error] of outcomes) {
            expect(SandboxControlRefusedError.isInstance(error), `${control} is refused`).toBe(true)
            expect((error as SandboxControlRefusedError).control).toBe(control)
            expect((error as SandboxControlRefusedError).backend).toBe(sandboxes.provider.backend)
          }
          // Nothing changed: the sandbox runs as before.
          expect(sandbox.status).toBe('ready')
          expect((await sandbox.exec('echo', ['still here'])).stdout).toBe('still here\n')
          return
        }
        await sandboxes.withFresh({}, async (sandbox) => {
          const count = async () => Number((await sandbox.exec('cat', ['counter'])).stdout.trim())
          const loop = await sandbox.start('sh', COUNTER_LOOP)
          try {
            await sleep(500)
            const running = await count()
            await sleep(1_000)
            const countedInOneSecond = (await count()) - running
            expect(countedInOneSecond).toBeGreaterThan(5)

            const atPause = await count()
            await sandbox.pause()
            expect(sandbox.paused).toBe(true)
            expect(sandbox.status).toBe('busy')
            await sleep(PAUSED_MS)
            for (const call of [
              () => sandbox.exec('cat', ['counter']),
              () => sandbox.readFile('counter'),
              () => sandbox.writeFile('paused.txt', 'x'),
              () => sandbox.listFiles(),
            ]) {
              const error = await call().catch((caught: unknown) => caught)
              expect(SandboxPausedError.isInstance(error)).toBe(true)
            }
            // Pausing again changes nothing.
            await sandbox.pause()
            await sandbox.resume()
            expect(sandbox.status).toBe('busy')
            const atResume = await count()
            // Four seconds paused count less than two seconds of running: the
            // margin covers the counting between the reads and the freeze on
            // a loaded machine (measured: 3 to 18 across a 2 s pause).
            expect(atResume - atPause).toBeLessThan(countedInOneSecond * 2)
            await sleep(1_000)
            expect(await count()).toBeGreaterThan(atResume)
          } finally {
            await loop.kill()
          }
          await loop.wait()
          expect(sandbox.status).toBe('ready')
          // A paused sandbox is destroyed like any other (withFresh's own
          // destroy after this is a no-op: destroy is idempotent).
          await sandbox.pause()
          expect(sandbox.paused).toBe(true)
          await sandbox.destroy()
          expect(sandbox.status).toBe('destroyed')
          expect(sandbox.endReason).toBe('destroyed')
        })
      },
      timeout,
    )
  })
}
