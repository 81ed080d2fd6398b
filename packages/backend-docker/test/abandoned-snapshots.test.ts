import { randomBytes } from 'node:crypto'
import { existsSync } from 'node:fs'
import { join } from 'node:path'
import { describe, expect, it } from 'vitest'
import { collectGarbage } from '../src/index.js'
import {
  CHECKPOINT_DIRECTORY,
  engineRootDir,
  removeMemoryCheckpoint,
} from '../src/memory-snapshot.js'
import { runHostThatDies } from './dying-host.js'
import { docker } from './test-run.js'

/** A label of this file's own: its garbage collections look at nothing else. */
const SCOPE_KEY = 'cordon-test.abandoned-snapshots'

const tagged = async (id: string): Promise<boolean> =>
  (await docker.listImages({ filters: { reference: [`cordon-snapshot:${id}`] } })).length > 0

describe('a host that dies mid-fork', () => {
  it("leaves its fork's snapshot to a scoped garbage collection, whatever the retention", async () => {
    const scope = { [SCOPE_KEY]: `fork-${randomBytes(4).toString('hex')}` }
    try {
      const output = await runHostThatDies('host-dies-mid-fork.mjs', {
        CORDON_TEST_LABELS: JSON.stringify(scope),
      })
      const snapshotId = /snapshot (snp_\w+)/.exec(output)?.[1]
      expect(snapshotId, output).toBeDefined()
      expect(await tagged(snapshotId!)).toBe(true)

      // The default retention (7 days) would keep a user's snapshot this recent.
      const report = await collectGarbage({ docker, labels: scope })
      expect(report.images).toHaveLength(1)
      expect(await tagged(snapshotId!)).toBe(false)
    } finally {
      // The dead host's sandbox, and its snapshot if the collection above failed.
      await collectGarbage({ docker, labels: scope, snapshotRetentionMs: 0 })
    }
  })
})

describe('a host that dies after its memory snapshot is checkpointed', () => {
  it('leaves the checkpoint, which no image records, to a scoped garbage collection', async () => {
    const scope = { [SCOPE_KEY]: `checkpoint-${randomBytes(4).toString('hex')}` }
    const rootDir = await engineRootDir(docker)
    expect(rootDir, 'this test writes the engine data directory').toBeDefined()
    let snapshotId: string | undefined
    try {
      const output = await runHostThatDies('host-dies-after-checkpoint.mjs', {
        CORDON_TEST_LABELS: JSON.stringify(scope),
      })
      snapshotId = /snapshot (snp_\w+)/.exec(output)?.[1]
      expect(snapshotId, output).toBeDefined()
      const checkpoint = join(rootDir!, CHECKPOINT_DIRECTORY, snapshotId!)
      expect(existsSync(checkpoint)).toBe(true)
      expect(await tagged(snapshotId!)).toBe(false)

      // Recent, and named by no image: only its owner file places it in the scope and judges it.
      const report = await collectGarbage({ docker, labels: scope })
      expect(report.checkpoints).toEqual([snapshotId])
      expect(existsSync(checkpoint)).toBe(false)
    } finally {
      // The dead host's sandbox, and its checkpoint if the collection above failed.
      await collectGarbage({ docker, labels: scope, snapshotRetentionMs: 0 })
      if (snapshotId) removeMemoryCheckpoint(rootDir!, snapshotId)
    }
  })
})
