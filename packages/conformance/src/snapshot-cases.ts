import {
  type CordonSandbox,
  SandboxControlRefusedError,
  SandboxSnapshotNotFoundError,
} from '@cordon/core'
import { describe, expect, it } from 'vitest'
import { expectRefused } from './refusal.js'
import type { SandboxesUnderTest } from './shared-sandbox.js'
import type { SandboxConformanceOptions } from './suite-options.js'

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms))

/** A well-formed id no backend keeps. */
const UNKNOWN_SNAPSHOT = 'snp_aaaaaaaaaaaaaaaaaaaaaaaaaa'

/** A loop that counts in a file of the working directory, as fast as it can, the count always whole. */
const COUNTER_LOOP = [
  '-c',
  'i=0; while :; do i=$((i+1)); echo $i > counter.new; mv counter.new counter; done',
]

async function text(sandbox: CordonSandbox, path: string): Promise<string> {
  return (await sandbox.readFile(path)).toString('utf8')
}

async function exists(sandbox: CordonSandbox, path: string): Promise<boolean> {
  return sandbox.readFile(path).then(
    () => true,
    () => false,
  )
}

function expectControlRefused(error: unknown, control: string, backend: string): void {
  expect(
    SandboxControlRefusedError.isInstance(error),
    `${control} is refused with SandboxControlRefusedError, got ${String(error)}`,
  ).toBe(true)
  expect(error).toMatchObject({ control, backend })
}

/** Snapshots and fork: proved where declared, checked as refusals where not. */
export function snapshotCases(options: SandboxConformanceOptions, sandboxes: SandboxesUnderTest) {
  const timeout = (options.timeoutMs ?? 60_000) * 3

  describe('snapshots and fork', () => {
    it(
      "snapshot declared: a file written before a snapshot is in a sandbox created from it and in each fork, and writes after it are each sandbox's own; declared false: snapshot, create({ snapshot }), fork and provider.snapshots are refused naming the control and the backend",
      async () => {
        const { provider } = sandboxes
        if (!sandboxes.declared.snapshot) {
          const sandbox = sandboxes.sandbox
          expectControlRefused(
            await sandbox.snapshot().catch((caught: unknown) => caught),
            'snapshot',
            provider.backend,
          )
          expectControlRefused(
            await sandbox.fork({ count: 1 }).catch((caught: unknown) => caught),
            'fork',
            provider.backend,
          )
          expectControlRefused(
            await provider.snapshots.list().catch((caught: unknown) => caught),
            'snapshot',
            provider.backend,
          )
          await expectRefused(sandboxes, { snapshot: UNKNOWN_SNAPSHOT }, 'snapshot')
          expect((await sandbox.exec('echo', ['still here'])).stdout).toBe('still here\n')
          return
        }
        await sandboxes.withFresh({}, async (source) => {
          await source.writeFile('snapshot-case/before.txt', 'before')
          const snapshot = await source.snapshot()
          try {
            expect(snapshot.memory).toBe(false)
            expect((await provider.snapshots.list()).map((listed) => listed.id)).toContain(
              snapshot.id,
            )
            await source.writeFile('snapshot-case/before.txt', 'changed in the source')
            await source.writeFile('snapshot-case/after.txt', 'after')

            await sandboxes.withFresh({ snapshot: snapshot.id }, async (restored) => {
              expect(restored.id).not.toBe(source.id)
              expect(await text(restored, 'snapshot-case/before.txt')).toBe('before')
              expect(await exists(restored, 'snapshot-case/after.txt')).toBe(false)
              await restored.writeFile('snapshot-case/before.txt', 'restored')
              expect(await text(source, 'snapshot-case/before.txt')).toBe('changed in the source')
            })
          } finally {
            await provider.snapshots.remove(snapshot.id)
          }
          expect((await provider.snapshots.list()).map((listed) => listed.id)).not.toContain(
            snapshot.id,
          )
          const gone = await provider.create({ snapshot: snapshot.id }).then(
            async (sandbox) => {
              await sandbox.destroy()
              return new Error('a removed snapshot started a sandbox')
            },
            (error: unknown) => error,
          )
          expect(SandboxSnapshotNotFoundError.isInstance(gone), String(gone)).toBe(true)

          // Fork copies the state as it is now, into sandboxes that share nothing writable.
          const forks = await source.fork({ count: 2, memory: false })
          try {
            expect(forks).toHaveLength(2)
            expect(new Set([source.id, ...forks.map((fork) => fork.id)]).size).toBe(3)
            for (const fork of forks) {
              expect(await text(fork, 'snapshot-case/before.txt')).toBe('changed in the source')
              expect(await text(fork, 'snapshot-case/after.txt')).toBe('after')
            }
            await forks[0]!.writeFile('snapshot-case/after.txt', 'fork 0')
            await forks[1]!.writeFile('snapshot-case/after.txt', 'fork 1')
            await source.writeFile('snapshot-case/after.txt', 'source')
            expect(await text(forks[0]!, 'snapshot-case/after.txt')).toBe('fork 0')
            expect(await text(forks[1]!, 'snapshot-case/after.txt')).toBe('fork 1')
            expect(await text(source, 'snapshot-case/after.txt')).toBe('source')
          } finally {
            await Promise.all(forks.map((fork) => fork.destroy()))
          }
        })
      },
      timeout,
    )

    it(
      'memorySnapshot declared: a counting loop goes on counting from where it was in a sandbox created from a memory snapshot; declared false: snapshot({ memory: true }) is refused naming snapshot.memory and the backend',
      async () => {
        const { provider } = sandboxes
        if (!sandboxes.declared.memorySnapshot) {
          expectControlRefused(
            await sandboxes.sandbox.snapshot({ memory: true }).catch((caught: unknown) => caught),
            sandboxes.declared.snapshot ? 'snapshot.memory' : 'snapshot',
            provider.backend,
          )
          expect((await sandboxes.sandbox.exec('echo', ['still here'])).stdout).toBe('still here\n')
          return
        }
        await sandboxes.withFresh({}, async (source) => {
          const count = async (sandbox: CordonSandbox) =>
            Number((await sandbox.exec('cat', ['counter'])).stdout.trim())
          await source.start('sh', COUNTER_LOOP)
          await sleep(1_000)
          const beforeSnapshot = await count(source)
          expect(beforeSnapshot).toBeGreaterThan(0)
          const snapshot = await source.snapshot({ memory: true })
          try {
            expect(snapshot.memory).toBe(true)
            await sandboxes.withFresh({ snapshot: snapshot.id }, async (restored) => {
              const atRestore = await count(restored)
              // It goes on from where it was, not from 0.
              expect(atRestore).toBeGreaterThanOrEqual(beforeSnapshot)
              await sleep(1_000)
              expect(await count(restored)).toBeGreaterThan(atRestore)
            })
            // The source goes on too.
            const sourceNow = await count(source)
            await sleep(500)
            expect(await count(source)).toBeGreaterThan(sourceNow)
          } finally {
            await provider.snapshots.remove(snapshot.id)
          }
        })
      },
      timeout,
    )
  })
}
