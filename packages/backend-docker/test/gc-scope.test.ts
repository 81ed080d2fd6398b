import { randomBytes } from 'node:crypto'
import { type CordonSandboxProvider, SandboxConfigValidationError } from '@cordon/core'
import { afterAll, describe, expect, it } from 'vitest'
import { collectGarbage } from '../src/index.js'
import { engineVolumeName } from '../src/named-volumes.js'
import { leaveDeadOwnersVolume, volumeGoneWithin } from './dead-owner.js'
import { docker, testProvider } from './test-run.js'

/** A label of this test's own: two hosts sharing the engine, told apart by it. */
const SCOPE_KEY = 'cordon-test.gc-scope'
const mine = { [SCOPE_KEY]: `mine-${randomBytes(4).toString('hex')}` }
const theirs = { [SCOPE_KEY]: `theirs-${randomBytes(4).toString('hex')}` }

describe('gc scoped by labels', () => {
  const providers: CordonSandboxProvider[] = []
  const made: string[] = []
  afterAll(async () => {
    for (const provider of providers) await provider.close()
    for (const name of made)
      await docker
        .getVolume(name)
        .remove()
        .catch(() => {})
  })

  it("removes what carries the labels and leaves another host's, dead owners and idle volumes alike", async () => {
    const myHost = testProvider({ labels: mine })
    const theirHost = testProvider({ labels: theirs })
    providers.push(myHost, theirHost)
    const myVolume = `gc-scope-mine-${process.pid}`
    const theirVolume = `gc-scope-theirs-${process.pid}`
    await myHost.volumes.create({ name: myVolume, sizeMb: 8 })
    await theirHost.volumes.create({ name: theirVolume, sizeMb: 8 })
    made.push(engineVolumeName(myVolume), engineVolumeName(theirVolume))
    const myDead = leaveDeadOwnersVolume(mine)
    const theirDead = leaveDeadOwnersVolume(theirs)
    made.push(myDead, theirDead)

    // Every named volume is past a retention of 0: only the scope decides.
    const report = await collectGarbage({ docker, labels: mine, volumeRetentionMs: 0 })
    expect(report.namedVolumes.map((volume) => volume.name)).toEqual([myVolume])
    expect(report.namedVolumes[0]?.removed).toBe(true)
    expect(report.volumes).toContain(engineVolumeName(myVolume))
    expect(report.volumes).not.toContain(engineVolumeName(theirVolume))
    expect(report.volumes).not.toContain(theirDead)
    // Another host's background sweep may have taken the dead owner's first; gone either way.
    expect(await volumeGoneWithin(myDead, 5_000)).toBe(true)
    expect((await myHost.volumes.list()).map((volume) => volume.name)).not.toContain(myVolume)
    // Named volumes go only by an explicit retention, so theirs is certainly still there.
    expect((await theirHost.volumes.list()).map((volume) => volume.name)).toContain(theirVolume)
    // Nothing outside the scope was looked at: no runtime, no other host's resource.
    expect(report.containers).toEqual([])
    expect(report.unjudged).toEqual([])
  })

  /**
   * Makes a sandbox and a snapshot on each of two hosts (mine, theirs), then
   * runs `check` with the image id of each snapshot, and removes them all.
   */
  async function withSnapshotOnEachHost(
    hosts: { mine: CordonSandboxProvider; theirs: CordonSandboxProvider },
    check: (images: { mine: string; theirs: string }) => Promise<void>,
  ): Promise<void> {
    providers.push(hosts.mine, hosts.theirs)
    const [mySandbox, theirSandbox] = await Promise.all([
      hosts.mine.create(),
      hosts.theirs.create(),
    ])
    try {
      const [mySnapshot, theirSnapshot] = await Promise.all([
        mySandbox.snapshot(),
        theirSandbox.snapshot(),
      ])
      try {
        // Past the 10 ms retention the collections below use.
        await new Promise((resolve) => setTimeout(resolve, 20))
        const imageOf = async (id: string) =>
          (await docker.listImages({ filters: { label: [`cordon.snapshot=${id}`] } }))[0]!.Id
        await check({ mine: await imageOf(mySnapshot.id), theirs: await imageOf(theirSnapshot.id) })
      } finally {
        await hosts.mine.snapshots.remove(mySnapshot.id)
        await hosts.theirs.snapshots.remove(theirSnapshot.id)
      }
    } finally {
      await Promise.all([mySandbox.destroy(), theirSandbox.destroy()])
    }
  }

  it('takes only the snapshots carrying the labels', async () => {
    const hosts = { mine: testProvider({ labels: mine }), theirs: testProvider({ labels: theirs }) }
    await withSnapshotOnEachHost(hosts, async (images) => {
      const report = await collectGarbage({
        docker,
        labels: mine,
        snapshotRetentionMs: 10,
        dryRun: true,
      })
      expect(report.images).toEqual([images.mine])
      expect(report.images).not.toContain(images.theirs)
    })
  })

  it("applies a retention only to the snapshots carrying its retention labels, as a provider's sweep does", async () => {
    // Both hosts share a label, so that the collection below, scoped by it, sees both.
    const shared = { 'cordon-test.gc-scope.shared': `shared-${randomBytes(4).toString('hex')}` }
    const hosts = {
      mine: testProvider({ labels: { ...shared, ...mine }, sweepDeadOwners: false }),
      theirs: testProvider({ labels: { ...shared, ...theirs }, sweepDeadOwners: false }),
    }
    await withSnapshotOnEachHost(hosts, async (images) => {
      const report = await collectGarbage({
        docker,
        labels: shared,
        snapshotRetentionMs: 10,
        snapshotRetentionLabels: { ...shared, ...mine },
        dryRun: true,
      })
      expect(report.images).toEqual([images.mine])
      expect(report.images).not.toContain(images.theirs)
      // Theirs is kept by its retention alone, and the report says so.
      expect(report.snapshotsWithinRetention).toBe(1)
    })
  })

  it('refuses a label key the engine would read as something else', async () => {
    const refused: Array<Record<string, string>> = [
      { 'a=b': 'c' },
      { '': 'x' },
      { 'has space': 'x' },
    ]
    for (const labels of refused) {
      const error = await collectGarbage({ docker, labels, dryRun: true }).catch(
        (caught: unknown) => caught,
      )
      expect(SandboxConfigValidationError.isInstance(error)).toBe(true)
      expect((error as SandboxConfigValidationError).issues[0]?.path).toBe(
        `labels.${Object.keys(labels)[0]}`,
      )
    }
  })
})
