import { randomUUID } from 'node:crypto'
import {
  type CordonSandbox,
  SandboxAbortedError,
  SandboxDestroyedError,
  type SandboxExecResult,
} from '@cordon/core'
import { SANDBOX_ID_PATTERN } from '@cordon/core/backend'
import { describe, expect, it } from 'vitest'
import type { SandboxesUnderTest } from './shared-sandbox.js'
import type { SandboxConformanceOptions } from './suite-options.js'

export function lifecycleCases(
  options: SandboxConformanceOptions,
  sandboxes: SandboxesUnderTest,
): void {
  const timeout = options.timeoutMs ?? 60_000

  describe('lifecycle', () => {
    it(
      'hands out an exec-ready sandbox with an sbx_ id and the environment its backend declares',
      async () => {
        const sandbox = sandboxes.sandbox
        expect(sandbox.id).toMatch(SANDBOX_ID_PATTERN)
        expect(sandbox.status).toBe('ready')
        const { environment } = sandboxes.declared
        expect(sandboxes.provider.environment, 'provider.environment').toBe(environment)
        expect(sandbox.environment, 'sandbox.environment').toBe(environment)
        expect(sandbox.rootDir.startsWith('/')).toBe(true)
      },
      timeout,
    )

    it(
      'destroy is idempotent and later calls fail with SandboxDestroyedError',
      async () => {
        const sandbox = await sandboxes.provider.create()
        await sandbox.writeFile('x.txt', 'x')
        await sandbox.destroy()
        await sandbox.destroy()
        expect(sandbox.status).toBe('destroyed')
        const error = await sandbox.exec('true').catch((caught: unknown) => caught)
        expect(SandboxDestroyedError.isInstance(error)).toBe(true)
        const fileError = await sandbox.readFile('x.txt').catch((caught: unknown) => caught)
        expect(SandboxDestroyedError.isInstance(fileError)).toBe(true)
      },
      timeout,
    )

    it(
      'create honours an already aborted signal and one that fires mid-way',
      async () => {
        const early = new AbortController()
        early.abort()
        const error = await sandboxes.provider
          .create({ signal: early.signal })
          .catch((caught: unknown) => caught)
        expect(SandboxAbortedError.isInstance(error)).toBe(true)
        const late = new AbortController()
        const pending = sandboxes.provider.create({ signal: late.signal })
        setTimeout(() => late.abort(), 5)
        const lateError = await pending.catch((caught: unknown) => caught)
        expect(SandboxAbortedError.isInstance(lateError)).toBe(true)
      },
      timeout,
    )

    it(
      "reads create's timeoutMs as the default exec timeout, as the reference does, not as a lifetime",
      async () => {
        await sandboxes.withFresh({ timeoutMs: 1500 }, async (sandbox) => {
          const started = performance.now()
          const slow = await sandbox.exec('sleep', ['30'])
          expect(slow.timedOut).toBe(true)
          expect(performance.now() - started).toBeLessThan(15_000)
          // Past the 1.5 s, the sandbox itself lives on, and a call may still ask for longer.
          await new Promise((resolve) => setTimeout(resolve, 500))
          expect((await sandbox.exec('true')).exitCode).toBe(0)
          const longer = await sandbox.exec('sleep', ['2'], { timeout: 20_000 })
          expect(longer).toMatchObject({ exitCode: 0, timedOut: false })
          expect(sandbox.status).toBe('ready')
        })
      },
      timeout,
    )

    it(
      'disposes a started process and the sandbox at the end of an `await using` scope',
      async () => {
        let sandbox: CordonSandbox | undefined
        let ended: Promise<SandboxExecResult> | undefined
        {
          await using scoped = await sandboxes.provider.create()
          sandbox = scoped
          {
            await using sleeper = await scoped.start('sleep', ['30'])
            ended = sleeper.wait()
          }
          expect(await ended).toMatchObject({ signal: 'SIGKILL' })
          expect(scoped.status).toBe('ready')
        }
        expect(sandbox.status).toBe('destroyed')
        const error = await sandbox.exec('true').catch((caught: unknown) => caught)
        expect(SandboxDestroyedError.isInstance(error)).toBe(true)
      },
      timeout,
    )

    it(
      'reports busy while a command runs',
      async () => {
        const running = sandboxes.sandbox.exec('sleep', ['1'])
        await new Promise((resolve) => setTimeout(resolve, 200))
        expect(sandboxes.sandbox.status).toBe('busy')
        await running
        expect(sandboxes.sandbox.status).toBe('ready')
      },
      timeout,
    )

    it(
      'destroys a sandbox when its lifetime (lifetimeMs) runs out',
      async () => {
        // Long enough to outlast a create on a loaded machine (a gVisor one took
        // over 1.5 s in CI): a lifetime may count from the sandbox's own start.
        // It may also count from when the sandbox was ready (the host's own
        // timer does), so the check waits for the later of the two.
        const requestedAt = Date.now()
        const sandbox = await sandboxes.provider.create({ lifetimeMs: 4000 })
        const readyAt = Date.now()
        expect((await sandbox.exec('true')).exitCode).toBe(0)
        const checkAt = Math.max(requestedAt + 6000, readyAt + 5000)
        await new Promise((resolve) => setTimeout(resolve, checkAt - Date.now()))
        const error = await sandbox.exec('true').catch((caught: unknown) => caught)
        expect(
          SandboxDestroyedError.isInstance(error),
          `after ${checkAt - requestedAt} ms: ${String(error)}`,
        ).toBe(true)
      },
      timeout,
    )

    it(
      'gives each sandbox only the environment the host passed',
      async () => {
        // A name and value of this call's own: suites of two providers may
        // run at the same time in one process, and one's clean-up must not
        // take the variable away while the other checks for it.
        const unique = randomUUID().replaceAll('-', '')
        const name = `CORDON_CONFORMANCE_HOST_SECRET_${unique}`
        const value = `host-only-${unique}`
        process.env[name] = value
        try {
          await sandboxes.withFresh({ env: { VISIBLE: 'yes' } }, async (sandbox) => {
            const env = await sandbox.exec('env')
            expect(env.stdout).toContain('VISIBLE=yes')
            expect(env.stdout).not.toContain(value)
            expect(env.stdout).not.toContain(name)
          })
        } finally {
          delete process.env[name]
        }
      },
      timeout,
    )

    it(
      "keeps sandboxes apart: one cannot see another one's files",
      async () => {
        await sandboxes.withFresh({}, async (first) => {
          await first.writeFile('private.txt', 'first only')
          await sandboxes.withFresh({}, async (second) => {
            expect(await second.listFiles()).toEqual([])
          })
        })
      },
      timeout,
    )
  })
}
