import { SandboxOperationError } from '@cordon/core'
import { describe, expect, it } from 'vitest'
import type { SandboxesUnderTest } from './shared-sandbox.js'
import type { SandboxConformanceOptions } from './suite-options.js'

/**
 * Processes started with `start`: listed with their status and exit code,
 * detached from, and attached to again with the output they wrote while
 * nobody was attached.
 */
export function processCases(
  options: SandboxConformanceOptions,
  sandboxes: SandboxesUnderTest,
): void {
  const timeout = options.timeoutMs ?? 60_000

  describe('started processes', () => {
    it(
      'lists a started process while it runs and after it exits, with its exit code',
      async () => {
        const sandbox = sandboxes.sandbox
        const process = await sandbox.start('sh', ['-c', 'read go; exit 5'])
        const running = (await sandbox.listProcesses()).find((entry) => entry.id === process.id)
        expect(running).toMatchObject({
          pid: process.pid,
          command: 'sh',
          status: 'running',
          attached: true,
        })
        await process.write('now\n')
        expect((await process.wait()).exitCode).toBe(5)
        const ended = (await sandbox.listProcesses()).find((entry) => entry.id === process.id)
        expect(ended).toMatchObject({ status: 'exited', exitCode: 5 })
      },
      timeout,
    )

    it(
      'reattaches to a detached process and replays what it wrote meanwhile',
      async () => {
        const sandbox = sandboxes.sandbox
        let before = ''
        const process = await sandbox.start(
          'sh',
          [
            '-c',
            'echo before; sleep 0.5; echo while-detached; echo oops >&2; read x; echo "$x"; exit 9',
          ],
          { onOutput: (chunk) => (before += chunk.data) },
        )
        for (let i = 0; i < 100 && before !== 'before\n'; i++)
          await new Promise((resolve) => setTimeout(resolve, 20))
        await process.detach()
        expect(
          SandboxOperationError.isInstance(await process.wait().catch((e: unknown) => e)),
        ).toBe(true)
        // Wait for the output written with nobody attached.
        await new Promise((resolve) => setTimeout(resolve, 1_000))
        expect(
          (await sandbox.listProcesses()).find((entry) => entry.id === process.id),
        ).toMatchObject({ status: 'running', attached: false })
        const again = await sandbox.attachProcess(process.id!)
        expect(again.droppedOutputBytes).toBe(0)
        await again.write('after\n')
        const result = await again.wait()
        expect(result).toMatchObject({
          exitCode: 9,
          stdout: 'while-detached\nafter\n',
          stderr: 'oops\n',
        })
      },
      timeout,
    )
  })
}
