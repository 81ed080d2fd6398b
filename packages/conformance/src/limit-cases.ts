import { SandboxDestroyedError } from '@cordon/core'
import { describe, expect, it } from 'vitest'
import { expectRefused } from './refusal.js'
import type { SandboxesUnderTest } from './shared-sandbox.js'
import type { SandboxConformanceOptions } from './suite-options.js'

/** Memory and process limits: each proved where declared, its refusal checked where not. */
export function limitCases(
  options: SandboxConformanceOptions,
  sandboxes: SandboxesUnderTest,
): void {
  const timeout = options.timeoutMs ?? 60_000

  describe('limits', () => {
    it(
      'memoryLimit declared: a memory bomb is killed at memoryLimitMb and reported, never a hang; declared false: create({ memoryLimitMb }) is refused naming it and the backend',
      async () => {
        const declared = sandboxes.declared
        if (!declared.memoryLimit) {
          await expectRefused(sandboxes, { memoryLimitMb: 256 }, 'memoryLimitMb')
          return
        }
        await sandboxes.withFresh({ memoryLimitMb: 64 }, async (sandbox) => {
          // Doubling a shell string quickly needs far more than 64 MiB.
          const result = await sandbox.exec(
            'sh',
            ['-c', 'x=aaaaaaaaaaaaaaaa; while :; do x="$x$x"; done'],
            { timeout: 30_000 },
          )
          expect(result.timedOut).toBe(false)
          expect(result.exitCode).not.toBe(0)
          if (declared.oomReporting) expect(result.oomKilled).toBe(true)
          if (declared.survivesOutOfMemory) {
            expect((await sandbox.exec('echo', ['still here'])).stdout).toBe('still here\n')
          } else {
            const after = await sandbox.exec('echo', ['gone']).catch((caught: unknown) => caught)
            expect(SandboxDestroyedError.isInstance(after)).toBe(true)
          }
        })
      },
      timeout,
    )

    it(
      'processLimit declared: fork fails past maxProcesses, and the sandbox recovers; declared false: create({ maxProcesses }) is refused naming it and the backend',
      async () => {
        if (!sandboxes.declared.processLimit) {
          await expectRefused(sandboxes, { maxProcesses: 64 }, 'maxProcesses')
          return
        }
        await sandboxes.withFresh({ maxProcesses: 24 }, async (sandbox) => {
          const result = await sandbox.exec(
            'sh',
            [
              '-c',
              // Each child lives long enough that the first are still there when the
              // last are forked, however slow forking is (gVisor's on a loaded machine).
              'n=0; while [ $n -lt 60 ]; do sleep 8 & n=$((n+1)); done; echo started $n; wait',
            ],
            { timeout: 20_000 },
          )
          expect(`${result.stdout}${result.stderr}`).toMatch(
            /can't fork|Resource temporarily unavailable|fork/i,
          )
          // Once the short-lived children exit, the slots are free again.
          await new Promise((resolve) => setTimeout(resolve, 3000))
          const after = await sandbox.exec('sh', ['-c', 'echo recovered'])
          expect(after.stdout).toBe('recovered\n')
        })
      },
      timeout,
    )
  })
}
