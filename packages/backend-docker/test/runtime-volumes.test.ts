import { readFileSync, statSync } from 'node:fs'
import { createInterface } from 'node:readline'
import { LABEL } from '@cordon/core/backend'
import { BUSYBOX_IMAGE } from '@cordon/test-support'
import { describe, expect, it } from 'vitest'
import { currentRuntimeVolume } from '../src/agent-runtime.js'
import { ensureHugePageNode, KEEPER_LABEL, KEEPER_MEMORY_MB } from '../src/huge-page-node.js'
import { collectGarbage, createDockerSandboxProvider } from '../src/index.js'
import { KEEPER_IMAGE } from '../src/keeper-image.js'
import { memoryCgroupOf } from './memory-cgroup.js'
import { privateEngineForSuite } from './private-engine.js'

/**
 * The agent runtime volumes (agent-runtime.ts): one per build of cordon and
 * Node, shared by every host of that build. Old ones are removed once
 * nothing uses them, and a host whose runtime was removed under it fills it
 * again. On an engine of the test's own, so no other test's runtime is
 * touched.
 */
describe('agent runtime volumes', () => {
  const engine = privateEngineForSuite()

  const provider = (image = BUSYBOX_IMAGE) =>
    createDockerSandboxProvider({
      backend: {
        tier: 'container',
        image,
        socketPath: engine.socketPath,
        sweepDeadOwners: false,
      },
      layout: { outputs: { source: { type: 'ephemeral' } } },
    })
  const volumeNames = async (): Promise<string[]> =>
    ((await engine.docker.listVolumes()).Volumes ?? []).map((volume) => volume.Name)
  /** The agent's process on this host: the container's init, then the launcher, then the agent. */
  const agentProcess = async (sandboxId: string): Promise<number> => {
    const [info] = await engine.docker.listContainers({
      filters: { label: [`cordon.sandbox=${sandboxId}`] },
    })
    const init = (await engine.docker.getContainer(info!.Id).inspect()).State.Pid
    const children = (pid: number) =>
      readFileSync(`/proc/${pid}/task/${pid}/children`, 'utf8').trim().split(' ').map(Number)
    return children(children(init)[0]!)[0]!
  }
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
      // As a person's `docker rm -f` and `docker volume rm`, or another host's `cordon gc`, would.
      await engine.docker.getContainer(`${runtime}-keeper`).remove({ force: true })
      for (const name of [`${runtime}-complete`, `${runtime}-node`, runtime])
        await engine.docker.getVolume(name).remove()

      // The filler, seen through the engine's events: made from the create's
      // image, never started, and removed once the volume is full.
      const filler = `${runtime}-filling`
      const fillerEvents: { action: string; image?: string }[] = []
      const events = (await engine.docker.getEvents({
        filters: { type: ['container'], container: [filler] },
      })) as NodeJS.ReadableStream & { destroy(): void }
      // Line by line, as the backend reads them (engine-events.ts): a line may span reads.
      createInterface({ input: events }).on('line', (line) => {
        const event = JSON.parse(line) as {
          Action: string
          Actor: { Attributes: Record<string, string> }
        }
        if (event.Actor.Attributes.name === filler)
          fillerEvents.push({ action: event.Action, image: event.Actor.Attributes.image })
      })
      let second: Awaited<ReturnType<typeof hosted.create>>
      try {
        second = await hosted.create()
        for (let waited = 0; waited < 5_000; waited += 50) {
          if (fillerEvents.some((event) => event.action === 'destroy')) break
          await new Promise((resolve) => setTimeout(resolve, 50))
        }
      } finally {
        events.destroy()
      }
      const actions = fillerEvents.map((event) => event.action)
      expect(actions[0]).toBe('create')
      expect(actions.at(-1)).toBe('destroy')
      expect(actions).not.toContain('start')
      expect(fillerEvents[0]!.image).toBe(BUSYBOX_IMAGE)
      await expect(engine.docker.getContainer(filler).inspect()).rejects.toMatchObject({
        statusCode: 404,
      })
      expect((await second.exec('echo', ['two'])).stdout).toBe('two\n')
      await second.destroy()
      const volume = await engine.docker.getVolume(runtime).inspect()
      expect(volume.Labels?.[LABEL.role]).toBe('runtime')
      expect(await volumeNames()).toContain(`${runtime}-complete`)
    } finally {
      await hosted.close()
    }
  })

  it("every sandbox's agent runs from one huge-page copy of Node, which one keeper holds", async () => {
    const hosted = provider()
    try {
      const sandboxes = [await hosted.create(), await hosted.create()]
      const mapped: string[] = []
      for (const sandbox of sandboxes) {
        const agent = await agentProcess(sandbox.id)
        expect(readFileSync(`/proc/${agent}/cmdline`, 'utf8').split('\0')).toContain(
          '/.cordon-node/node',
        )
        // Mapped 2 MiB at a time: tens of MiB of Node's text in huge pages.
        const rollup = readFileSync(`/proc/${agent}/smaps_rollup`, 'utf8')
        const pmdKiB = Number(/^ShmemPmdMapped:\s+(\d+) kB/m.exec(rollup)?.[1])
        expect(pmdKiB).toBeGreaterThan(16 * 1024)
        // The same file (device and inode) in both: one copy for the engine.
        const node = readFileSync(`/proc/${agent}/maps`, 'utf8')
          .split('\n')
          .find((line) => line.endsWith('/.cordon-node/node'))!
        mapped.push(node.split(/\s+/).slice(3, 5).join(' '))
        // Read-only inside the sandbox, like the runtime volume.
        const write = await sandbox.exec('sh', ['-c', 'echo x > /.cordon-node/node'])
        expect(write.exitCode).not.toBe(0)
        expect((await sandbox.exec('echo', ['ok'])).stdout).toBe('ok\n')
      }
      expect(mapped[0]).toBe(mapped[1])
      const keepers = await engine.docker.listContainers({
        filters: { label: [`${KEEPER_LABEL}=keeper`] },
      })
      expect(keepers.map((keeper) => keeper.Names[0])).toEqual([
        `/${currentRuntimeVolume()}-keeper`,
      ])
      // The keeper holds Node's ~100 MiB on its volume within a small memory
      // limit: the engine's archive API wrote those pages, so they are not charged to it.
      const keeper = await engine.docker.getContainer(keepers[0]!.Id).inspect()
      const memory = memoryCgroupOf(keeper.State.Pid)
      expect(memory.limit()).toBe(KEEPER_MEMORY_MB * 1024 * 1024)
      expect(memory.usage()).toBeLessThan(memory.limit() / 2)
      expect(memory.usage()).toBeLessThan(statSync(process.execPath).size / 16)
      for (const sandbox of sandboxes) await sandbox.destroy()
    } finally {
      await hosted.close()
    }
  })

  it('a keeper that is gone (an engine restart, a person) is made again by the next create', async () => {
    const hosted = provider()
    try {
      const keeper = `${currentRuntimeVolume()}-keeper`
      await engine.docker.getContainer(keeper).remove({ force: true })
      const sandbox = await hosted.create()
      expect((await sandbox.exec('echo', ['back'])).stdout).toBe('back\n')
      expect((await engine.docker.getContainer(keeper).inspect()).State.Running).toBe(true)
      const agent = await agentProcess(sandbox.id)
      expect(readFileSync(`/proc/${agent}/smaps_rollup`, 'utf8')).toMatch(
        /^ShmemPmdMapped:\s+[1-9]\d* kB/m,
      )
      await sandbox.destroy()
    } finally {
      await hosted.close()
    }
  })

  it('where the engine cannot make the huge-page copy, there is none (the agent runs from the runtime volume)', async () => {
    const made = await ensureHugePageNode(engine.docker, {
      runtimeVolume: 'cordon-runtime-00000000000000dd',
      runtimeMount: '/.cordon',
      launcher: '/.cordon/bin/cordon-launcher',
      // No binary to copy: the copy cannot be made.
      nodeSource: '/nonexistent/node',
      labels: runtimeLabels('00000000000000dd'),
    })
    expect(made).toBeUndefined()
    await expect(
      engine.docker.getContainer('cordon-runtime-00000000000000dd-keeper-filling').inspect(),
    ).rejects.toThrow(/no such container/i)
    for (const volume of [
      'cordon-runtime-00000000000000dd-node',
      'cordon-runtime-00000000000000dd',
    ])
      await engine.docker
        .getVolume(volume)
        .remove()
        .catch(() => {})
  })

  it("the keeper runs from cordon's own image: the first provider's image is not held by it and lends it no labels", async () => {
    // A provider image of the host's own, labelled: committed from busybox on this engine.
    const base = await engine.docker.createContainer({ Image: BUSYBOX_IMAGE, Cmd: ['true'] })
    await base.commit({
      repo: 'cordon-test/keeper-probe',
      tag: 'latest',
      changes: 'LABEL cordon-test.keeper-probe=1',
    })
    await base.remove()
    const probeImage = 'cordon-test/keeper-probe:latest'
    // No keeper on the engine: the next create makes one, from whatever image it uses.
    for (const info of await engine.docker.listContainers({
      all: true,
      filters: { label: [`${KEEPER_LABEL}=keeper`] },
    }))
      await engine.docker.getContainer(info.Id).remove({ force: true })
    const hosted = provider(probeImage)
    try {
      const sandbox = await hosted.create()
      expect((await sandbox.exec('echo', ['probe'])).stdout).toBe('probe\n')
      await sandbox.destroy()
    } finally {
      await hosted.close()
    }
    const keeper = await engine.docker.getContainer(`${currentRuntimeVolume()}-keeper`).inspect()
    expect(keeper.State.Running).toBe(true)
    expect(keeper.Config.Labels).not.toHaveProperty('cordon-test.keeper-probe')
    // The host can remove its image while the keeper runs on.
    await engine.docker.getImage(probeImage).remove()
    expect((await engine.docker.getContainer(keeper.Id).inspect()).State.Running).toBe(true)
    expect(keeper.Image).toBe((await engine.docker.getImage(KEEPER_IMAGE).inspect()).Id)
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
    // An old runtime's huge-page Node and its keeper (which does not count as a use).
    await engine.docker.createVolume({
      Name: `${stale}-node`,
      Labels: runtimeLabels('00000000000000aa'),
    })
    const keeper = await engine.docker.createContainer({
      name: `${stale}-keeper`,
      Image: BUSYBOX_IMAGE,
      Cmd: ['sleep', '600'],
      Labels: { ...runtimeLabels('00000000000000aa'), 'cordon.runtime.part': 'keeper' },
      HostConfig: {
        NetworkMode: 'none',
        Mounts: [
          { Type: 'volume', Source: stale, Target: '/.cordon', ReadOnly: true },
          { Type: 'volume', Source: `${stale}-node`, Target: '/.cordon-node', ReadOnly: true },
        ],
      },
    })
    await keeper.start()
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
      expect(fresh.containers).not.toContain(keeper.id)

      // An hour on: the unused ones go, the lock first; a dry run only lists them.
      const later = Date.now() + 3_600_000
      const listed = await collectGarbage({ docker: engine.docker, dryRun: true, now: later })
      const staleParts = [stale, `${stale}-complete`, `${stale}-node`, unlabelled].sort()
      expect([...listed.volumes].sort()).toEqual(staleParts)
      expect([...listed.containers].sort()).toEqual([lock.id, keeper.id].sort())
      expect(await volumeNames()).toContain(stale)

      const report = await collectGarbage({ docker: engine.docker, now: later })
      expect(report.failed).toEqual([])
      expect([...report.volumes].sort()).toEqual(staleParts)
      // The mark goes before its volume: a host never finds a mark without its volume.
      expect(report.volumes.indexOf(`${stale}-complete`)).toBeLessThan(
        report.volumes.indexOf(stale),
      )
      const left = await volumeNames()
      expect(left).not.toEqual(expect.arrayContaining([stale]))
      expect(left).not.toContain(`${stale}-complete`)
      expect(left).not.toContain(unlabelled)
      expect(left).not.toContain(`${stale}-node`)
      expect(left).toEqual(
        expect.arrayContaining([
          runtime,
          `${runtime}-complete`,
          `${runtime}-node`,
          mounted,
          `${mounted}-complete`,
        ]),
      )
      const containersLeft = (await engine.docker.listContainers({ all: true })).map((c) => c.Id)
      expect(containersLeft).not.toContain(lock.id)
      expect(containersLeft).not.toContain(keeper.id)
      // The current runtime's keeper stays.
      expect((await engine.docker.getContainer(`${runtime}-keeper`).inspect()).State.Running).toBe(
        true,
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
      await keeper.remove({ force: true }).catch(() => {})
    }
  })
})
