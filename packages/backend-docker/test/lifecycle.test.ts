import { mkdtemp, readFile, rm, symlink, writeFile } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import {
  SandboxAbortedError,
  SandboxBackendUnavailableError,
  SandboxControlRefusedError,
  SandboxCreateTimeoutError,
  SandboxError,
  type SandboxEvent,
  SandboxImagePullError,
  SandboxPathError,
} from '@cordon/core'
import { BUSYBOX_IMAGE, engineLeftovers, testRunLabels } from '@cordon/test-support'
import { describe, expect, it } from 'vitest'
import { DEFAULT_SOCKET_PATH } from '../src/engine-connection.js'
import { collectGarbage, createDockerSandboxProvider } from '../src/index.js'
import { leaveDeadOwnersVolume, volumeGoneWithin } from './dead-owner.js'
import { runHostThatDies } from './dying-host.js'
import { engineFront } from './engine-front.js'
import { docker, testProvider } from './test-run.js'

describe('create and destroy', () => {
  it('removes the container and its volumes on destroy', async () => {
    const provider = testProvider()
    const sandbox = await provider.create()
    const name = `cordon-${sandbox.id}`
    expect((await docker.getContainer(name).inspect()).State.Running).toBe(true)
    await sandbox.destroy()
    await expect(docker.getContainer(name).inspect()).rejects.toMatchObject({ statusCode: 404 })
    const volumes =
      (await docker.listVolumes({ filters: { label: [`cordon.sandbox=${sandbox.id}`] } }))
        .Volumes ?? []
    expect(volumes).toEqual([])
    await provider.close()
  })

  it('cleans up everything when a step fails half-way (missing image)', async () => {
    const provider = testProvider({ image: 'cordon-test/no-such-image:latest' })
    const error = await provider.create().catch((caught: unknown) => caught)
    expect(SandboxImagePullError.isInstance(error)).toBe(true)
    expect((error as SandboxImagePullError).image).toBe('cordon-test/no-such-image:latest')
    await provider.close()
    const volumes =
      (await docker.listVolumes({ filters: { label: [`cordon.provider=${provider.instanceId}`] } }))
        .Volumes ?? []
    expect(volumes).toEqual([])
  })

  it('cleans up when the readiness budget runs out', async () => {
    const provider = testProvider({ readyTimeoutMs: 1 })
    const error = await provider.create().catch((caught: unknown) => caught)
    expect(SandboxCreateTimeoutError.isInstance(error)).toBe(true)
    await provider.close()
    // The late sweeps remove anything whose create call was still in flight.
    let containers = await docker.listContainers({
      all: true,
      filters: { label: [`cordon.provider=${provider.instanceId}`] },
    })
    for (let attempt = 0; attempt < 40 && containers.length > 0; attempt++) {
      await new Promise((resolve) => setTimeout(resolve, 250))
      containers = await docker.listContainers({
        all: true,
        filters: { label: [`cordon.provider=${provider.instanceId}`] },
      })
    }
    expect(containers).toEqual([])
  })

  it('a create aborted while the engine is slow to make its container leaves nothing once it rejects', async () => {
    // The engine takes the container's create only after the abort: cut off
    // on the client, the call would still land, after the cleanup looked.
    const front = await engineFront({
      hold: { request: '/containers/create?name=cordon-sbx_', ms: 400 },
    })
    const provider = testProvider({ socketPath: front.socketPath })
    try {
      const controller = new AbortController()
      void front.held.then(() => controller.abort(new Error('given up')))
      const error = await provider
        .create({ signal: controller.signal })
        .catch((caught: unknown) => caught)
      // Whatever the engine did with the create, it has answered by now.
      await front.answered
      expect(await providerResources(provider.instanceId)).toEqual([])
      expect(SandboxAbortedError.isInstance(error), String(error)).toBe(true)
    } finally {
      await provider.close()
      await front.close()
    }
  })

  it('close() with a create in flight waits for it, removes what it made and rejects the create', async () => {
    const provider = testProvider()
    let settled = false
    const pending = provider.create().then(
      (sandbox) => ({ sandbox, error: undefined }),
      (error: unknown) => ({ sandbox: undefined, error }),
    )
    void pending.then(() => {
      settled = true
    })
    // Its container is on the engine: the create is half-way.
    for (let attempt = 0; attempt < 400; attempt++) {
      if ((await providerResources(provider.instanceId)).length > 0) break
      await new Promise((resolve) => setTimeout(resolve, 10))
    }
    expect(settled).toBe(false)
    await provider.close()
    // Nothing is left the moment close() resolves, and the create has settled before it.
    expect(settled).toBe(true)
    expect(await providerResources(provider.instanceId)).toEqual([])
    const volumes =
      (await docker.listVolumes({ filters: { label: [`cordon.provider=${provider.instanceId}`] } }))
        .Volumes ?? []
    expect(volumes).toEqual([])
    const { sandbox, error } = await pending
    expect(sandbox?.status).toBeUndefined()
    expect(SandboxError.isInstance(error), String(error)).toBe(true)
    expect((error as Error).message).toContain('provider is closed')
  })

  it('reports an unreachable engine clearly', async () => {
    const provider = testProvider({ socketPath: '/nonexistent/docker.sock' })
    const error = await provider.create().catch((caught: unknown) => caught)
    expect(SandboxBackendUnavailableError.isInstance(error)).toBe(true)
    expect((error as Error).message).toContain('unreachable')
    await provider.close()
  })

  it('refuses setNetworkPolicy on a deny-all sandbox', async () => {
    const provider = testProvider()
    const sandbox = await provider.create()
    const error = await sandbox
      .setNetworkPolicy?.({ allowedHosts: ['example.com'] })
      .catch((caught: unknown) => caught)
    expect(SandboxControlRefusedError.isInstance(error)).toBe(true)
    await provider.close()
  })

  it('emits lifecycle events with timings', async () => {
    const events: SandboxEvent[] = []
    const provider = createDockerSandboxProvider({
      backend: {
        tier: 'container',
        image: BUSYBOX_IMAGE,
        labels: testRunLabels(),
      },
      layout: { outputs: { source: { type: 'ephemeral' } } },
      onEvent: (event) => events.push(event),
    })
    const sandbox = await provider.create()
    await sandbox.destroy()
    await provider.close()
    const phases = events.flatMap((event) => (event.type === 'lifecycle' ? [event.phase] : []))
    expect(phases).toEqual(['create.start', 'create.ready', 'destroy.start', 'destroy.end'])
    const ready = events.find(
      (event) => event.type === 'lifecycle' && event.phase === 'create.ready',
    )
    expect(ready && 'durationMs' in ready && ready.durationMs! > 0).toBe(true)
    // The create's steps, timed: where a slow create spent its time.
    const steps = ready?.type === 'lifecycle' ? (ready.steps ?? {}) : {}
    expect(Object.keys(steps)).toEqual(
      expect.arrayContaining([
        'creating the container',
        'starting the container',
        'waiting for the agent',
      ]),
    )
    for (const ms of Object.values(steps)) expect(ms).toBeGreaterThanOrEqual(0)
    const total = Object.values(steps).reduce((sum, ms) => sum + ms, 0)
    expect(total).toBeLessThanOrEqual((ready as { durationMs: number }).durationMs + 1)
    expect(steps['waiting for the agent']).toBeGreaterThan(0)
  })
})

describe('layout', () => {
  it('mounts host directories with their modes and skills under /mnt/skills/<id>', async () => {
    const root = await mkdtemp(join(tmpdir(), 'cordon-layout-'))
    try {
      const dirs = {
        outputs: join(root, 'out'),
        uploads: join(root, 'up'),
        skill: join(root, 'skill'),
      }
      const { mkdir, chown } = await import('node:fs/promises')
      for (const dir of Object.values(dirs)) {
        await mkdir(dir, { recursive: true })
        await chown(dir, 1000, 1000)
      }
      await writeFile(join(dirs.uploads, 'input.csv'), 'a,b\n')
      await writeFile(join(dirs.skill, 'SKILL.md'), '# skill\n')
      // A host directory the sandbox writes to must be writable by its user:
      // here the directory's owner is named, instead of a uid of the sandbox's own.
      const provider = testProvider(
        { user: '1000:1000' },
        {
          layout: {
            outputs: { source: { type: 'hostDir', hostPath: dirs.outputs } },
            uploads: { source: { type: 'hostDir', hostPath: dirs.uploads } },
            scratch: { source: { type: 'ephemeral', sizeMb: 8 } },
            skills: [{ id: 'csv-tools', source: { type: 'hostDir', hostPath: dirs.skill } }],
          },
        },
      )
      try {
        const sandbox = await provider.create()
        expect(sandbox.rootDir).toBe('/mnt/user-data/outputs')
        const written = await sandbox.exec('sh', [
          '-c',
          'echo result > /mnt/user-data/outputs/report.txt',
        ])
        expect(written.exitCode, written.stderr).toBe(0)
        expect(await readFile(join(dirs.outputs, 'report.txt'), 'utf8')).toBe('result\n')
        expect((await sandbox.exec('cat', ['/mnt/user-data/uploads/input.csv'])).stdout).toBe(
          'a,b\n',
        )
        expect((await sandbox.exec('cat', ['/mnt/skills/csv-tools/SKILL.md'])).stdout).toBe(
          '# skill\n',
        )
        const writeUpload = await sandbox.exec('sh', [
          '-c',
          'echo x > /mnt/user-data/uploads/new.txt',
        ])
        expect(writeUpload.stderr).toMatch(/read-only/i)
        const apiWrite = await sandbox
          .writeFile('/mnt/user-data/uploads/new.txt', 'x')
          .catch((caught: unknown) => caught)
        expect(SandboxPathError.isInstance(apiWrite)).toBe(true)
        expect(
          new TextDecoder().decode(await sandbox.readFile('/mnt/user-data/uploads/input.csv')),
        ).toBe('a,b\n')
        await sandbox.writeFile('/mnt/user-data/scratch/tmp.txt', 'scratch')
        const scratchFill = await sandbox.exec('dd', [
          'if=/dev/zero',
          'of=/mnt/user-data/scratch/fill',
          'bs=1M',
          'count=20',
        ])
        expect(scratchFill.stderr).toMatch(/no space/i)
      } finally {
        // Its sandboxes go with it: a failure here must not leave one for the tests after.
        await provider.close()
      }
    } finally {
      await rm(root, { recursive: true, force: true })
    }
  })

  it('refuses a host directory that holds the engine socket', async () => {
    // /var/run itself is refused when the provider is made (host-trees.test.ts);
    // an engine reached through a socket elsewhere is refused here, at create.
    const root = await mkdtemp(join(tmpdir(), 'cordon-socket-dir-'))
    const socketPath = join(root, 'docker.sock')
    await symlink(DEFAULT_SOCKET_PATH, socketPath)
    const provider = testProvider(
      { socketPath },
      { layout: { outputs: { source: { type: 'hostDir', hostPath: root } } } },
    )
    try {
      const error = await provider.create().catch((caught: unknown) => caught)
      expect(SandboxControlRefusedError.isInstance(error)).toBe(true)
      expect((error as Error).message).toContain('engine socket')
    } finally {
      await provider.close()
      await rm(root, { recursive: true, force: true })
    }
  })
})

describe('warm pool', () => {
  it('hands out started sandboxes that carry nothing from another, and refills', async () => {
    const provider = testProvider({}, { pool: { size: 2 } })
    await provider.warm()
    const first = await provider.create()
    expect((await first.exec('true')).exitCode).toBe(0)
    await first.writeFile('secret.txt', 'from the first claim')
    await first.destroy()
    await provider.warm()
    const second = await provider.create()
    expect(await second.listFiles()).toEqual([])
    expect(second.id).not.toBe(first.id)
    await provider.close()
    const containers = await docker.listContainers({
      all: true,
      filters: { label: [`cordon.provider=${provider.instanceId}`] },
    })
    expect(containers).toEqual([])
  })
})

/** Runs the crashing-owner fixture: it creates a sandbox and is killed; resolves with its ids. */
async function crashAnOwner(
  env: Record<string, string> = {},
): Promise<{ sandboxId: string; providerId: string; died: number }> {
  const output = await runHostThatDies('crashing-owner.mjs', env)
  const died = Date.now()
  const match = /sandbox (sbx_\w+) provider (\S+)/.exec(output)
  expect(match).not.toBeNull()
  return { sandboxId: match![1]!, providerId: match![2]!, died }
}

async function providerResources(providerId: string): Promise<string[]> {
  const filters = { label: [`cordon.provider=${providerId}`] }
  return [
    ...(await docker.listContainers({ all: true, filters })).map(
      (info) => info.Names[0] ?? info.Id,
    ),
    ...(await docker.listNetworks({ filters })).map((network) => network.Name),
  ]
}

describe('a host that dies', () => {
  it('leaves nothing behind: its ten sandboxes and gateway end by themselves within seconds', async () => {
    const { providerId, died } = await crashAnOwner({
      CORDON_TEST_PROXIED: '1',
      CORDON_TEST_COUNT: '10',
    })
    // Ten sandboxes, five of them behind the gateway, were running when it died.
    let left = await providerResources(providerId)
    for (let attempt = 0; attempt < 60 && left.length > 0; attempt++) {
      await new Promise((resolve) => setTimeout(resolve, 250))
      left = await providerResources(providerId)
    }
    expect(left).toEqual([])
    // Well inside the 15 s a reaper would be given.
    expect(Date.now() - died).toBeLessThan(15_000)
  })

  // (Any provider on this host may do the sweep: test files run side by side.)
  it("a new provider sweeps what dead owners left on the engine, and never a live owner's", async () => {
    const deadVolume = leaveDeadOwnersVolume()
    const live = testProvider()
    const kept = await live.create()
    try {
      const sweeper = testProvider()
      try {
        await sweeper.create()
        expect(await volumeGoneWithin(deadVolume, 10_000)).toBe(true)
        // The live owner's sandbox is untouched.
        expect((await docker.getContainer(`cordon-${kept.id}`).inspect()).State.Running).toBe(true)
      } finally {
        await sweeper.close()
      }
    } finally {
      await live.close()
      await docker
        .getVolume(deadVolume)
        .remove()
        .catch(() => {})
    }
  })

  it("a dead owners' sweep that failed is run again by the provider's next create", async () => {
    const deadVolume = leaveDeadOwnersVolume()
    // The sweep's first call, its listing of cordon's containers, fails once.
    const front = await engineFront({ refuse: SWEEP_LISTING })
    const provider = testProvider({ socketPath: front.socketPath })
    try {
      const first = await provider.create()
      await front.refused
      const second = await provider.create()
      // The second create started the sweep again, and this time it went through.
      let listings = 0
      for (let attempt = 0; attempt < 100 && listings === 0; attempt++) {
        listings = front.passed.filter((line) => line.includes(SWEEP_LISTING)).length
        if (listings === 0) await new Promise((resolve) => setTimeout(resolve, 100))
      }
      expect(listings).toBe(1)
      expect(await volumeGoneWithin(deadVolume, 10_000)).toBe(true)
      await Promise.all([first.destroy(), second.destroy()])
    } finally {
      await provider.close()
      await front.close()
      await docker
        .getVolume(deadVolume)
        .remove()
        .catch(() => {})
    }
  })
})

/** The sweep's listing of the containers cordon made, as the engine's request line has it. */
const SWEEP_LISTING = `/containers/json?all=true&filters=${encodeURIComponent(
  JSON.stringify({ label: ['cordon.managed=1'] }),
)}`

describe('cordon gc', () => {
  it('stops at its signal with SandboxAbortedError', async () => {
    const controller = new AbortController()
    controller.abort(new Error('enough'))
    const error = await collectGarbage({ docker, signal: controller.signal }).catch(
      (caught: unknown) => caught,
    )
    expect(SandboxAbortedError.isInstance(error)).toBe(true)
    expect(error).toMatchObject({ operation: 'collect garbage', cause: { message: 'enough' } })
  })

  it("removes the leftovers of a crashed owner and never a live owner's", async () => {
    const live = testProvider()
    const kept = await live.create()
    const { sandboxId: orphanId } = await crashAnOwner()
    // The orphan's channel closed with its owner, so it ends and the engine
    // removes it; collection removes whatever is left of it by then.
    await collectGarbage({ docker })
    let gone = false
    for (let attempt = 0; attempt < 40 && !gone; attempt++) {
      gone = await docker
        .getContainer(`cordon-${orphanId}`)
        .inspect()
        .then(
          () => false,
          (error: { statusCode?: number }) => error.statusCode === 404,
        )
      if (!gone) await new Promise((resolve) => setTimeout(resolve, 250))
    }
    expect(gone).toBe(true)
    expect((await docker.getContainer(`cordon-${kept.id}`).inspect()).State.Running).toBe(true)
    await live.close()
    expect((await engineLeftovers()).containers).toEqual([])
  })
})
