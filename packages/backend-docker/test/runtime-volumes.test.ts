import { LABEL } from '@cordon/core/backend'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { currentRuntimeVolume } from '../src/agent-runtime.js'
import { collectGarbage, createDockerSandboxProvider } from '../src/index.js'
import { PrivateEngine } from './private-engine.js'
import { BUSYBOX_IMAGE } from './test-images.js'

/**
 * The agent runtime volumes (agent-runtime.ts): one per build of cordon and
 * Node, shared by every host of that build. Old ones are removed once
 * nothing uses them, and a host whose runtime was removed under it fills it
 * again. On an engine of the test's own, so no other test's runtime is
 * touched.
 */
describe('agent runtime volumes', () => {
  const engine = new PrivateEngine()
  beforeAll(async () => {
    await engine.start()
    engine.loadTestImage()
  }, 60_000)
  afterAll(async () => {
    await engine.remove()
  }, 60_000)

  const provider = () =>
    createDockerSandboxProvider({
      backend: {
        tier: 'container',
        image: BUSYBOX_IMAGE,
        socketPath: engine.socketPath,
        sweepDeadOwners: false,
      },
      layout: { outputs: { source: { type: 'ephemeral' } } },
    })
  const volumeNames = async (): Promise<string[]> =>
    ((await engine.docker.listVolumes()).Volumes ?? []).map((volume) => volume.Name)
  const runtimeLabels = (hash: string) => ({
    [LABEL.managed]: '1',
    [LABEL.role]: 'runtime',
    'cordon.runtime': hash,
  })

  it('a host whose runtime volume was removed under it fills it again on its next create', async () => {
    const hosted = provider()
    try {
      const first = await hosted.create()
      expect((await first.exec('echo', ['one'])).stdout).toBe('one\n')
      await first.destroy()
      const runtime = currentRuntimeVolume()!
      expect(await volumeNames()).toEqual(expect.arrayContaining([runtime, `${runtime}-complete`]))
      // As a person's `docker volume rm`, or another host's `cordon gc`, would.
      await engine.docker.getVolume(`${runtime}-complete`).remove()
      await engine.docker.getVolume(runtime).remove()

      const second = await hosted.create()
      expect((await second.exec('echo', ['two'])).stdout).toBe('two\n')
      await second.destroy()
      const volume = await engine.docker.getVolume(runtime).inspect()
      expect(volume.Labels?.[LABEL.role]).toBe('runtime')
      expect(await volumeNames()).toContain(`${runtime}-complete`)
    } finally {
      await hosted.close()
    }
  })

  it('cordon gc removes runtimes nothing uses, and keeps the current one, mounted ones and new ones', async () => {
    const runtime = currentRuntimeVolume()!
    const stale = 'cordon-runtime-00000000000000aa'
    const unlabelled = 'cordon-runtime-00000000000000bb'
    const mounted = 'cordon-runtime-00000000000000cc'
    await engine.docker.createVolume({ Name: stale, Labels: runtimeLabels('00000000000000aa') })
    await engine.docker.createVolume({
      Name: `${stale}-complete`,
      Labels: runtimeLabels('00000000000000aa'),
    })
    // What the engine makes on demand for a container created after its runtime was removed.
    await engine.docker.createVolume({ Name: unlabelled })
    await engine.docker.createVolume({ Name: mounted, Labels: runtimeLabels('00000000000000cc') })
    await engine.docker.createVolume({
      Name: `${mounted}-complete`,
      Labels: runtimeLabels('00000000000000cc'),
    })
    const user = await engine.docker.createContainer({
      Image: BUSYBOX_IMAGE,
      Cmd: ['true'],
      HostConfig: {
        NetworkMode: 'none',
        Mounts: [{ Type: 'volume', Source: mounted, Target: '/.cordon', ReadOnly: true }],
      },
    })
    // A filler's lock that its filler left behind.
    const lock = await engine.docker.createContainer({
      name: `${stale}-filling`,
      Image: BUSYBOX_IMAGE,
      Cmd: ['true'],
      Labels: runtimeLabels('00000000000000aa'),
    })
    try {
      // Just made: kept, whatever else holds.
      const fresh = await collectGarbage({ docker: engine.docker })
      expect(fresh.volumes.filter((name) => name.startsWith('cordon-runtime-'))).toEqual([])
      expect(fresh.containers).not.toContain(lock.id)

      // An hour on: the unused ones go, the lock first; a dry run only lists them.
      const later = Date.now() + 3_600_000
      const listed = await collectGarbage({ docker: engine.docker, dryRun: true, now: later })
      expect([...listed.volumes].sort()).toEqual([stale, `${stale}-complete`, unlabelled].sort())
      expect(listed.containers).toEqual([lock.id])
      expect(await volumeNames()).toContain(stale)

      const report = await collectGarbage({ docker: engine.docker, now: later })
      expect(report.failed).toEqual([])
      expect([...report.volumes].sort()).toEqual([stale, `${stale}-complete`, unlabelled].sort())
      // The mark goes before its volume: a host never finds a mark without its volume.
      expect(report.volumes.indexOf(`${stale}-complete`)).toBeLessThan(
        report.volumes.indexOf(stale),
      )
      const left = await volumeNames()
      expect(left).not.toEqual(expect.arrayContaining([stale]))
      expect(left).not.toContain(`${stale}-complete`)
      expect(left).not.toContain(unlabelled)
      expect(left).toEqual(
        expect.arrayContaining([runtime, `${runtime}-complete`, mounted, `${mounted}-complete`]),
      )
      expect((await engine.docker.listContainers({ all: true })).map((c) => c.Id)).not.toContain(
        lock.id,
      )

      // The current runtime still serves sandboxes.
      const hosted = provider()
      try {
        const sandbox = await hosted.create()
        expect((await sandbox.exec('echo', ['still'])).stdout).toBe('still\n')
        await sandbox.destroy()
      } finally {
        await hosted.close()
      }
    } finally {
      await user.remove({ force: true })
      await lock.remove({ force: true }).catch(() => {})
    }
  })
})
