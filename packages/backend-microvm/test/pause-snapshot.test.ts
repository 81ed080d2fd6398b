import { createServer } from 'node:http'
import type { MicroVMBackendConfig } from '@cordon/builtin-backends'
import {
  SandboxControlRefusedError,
  SandboxDestroyedError,
  SandboxOperationError,
  SandboxPausedError,
  SandboxSnapshotNotFoundError,
  SandboxTransportError,
} from '@cordon/core'
import type { CordonSandboxBackend } from '@cordon/core/backend'
import { guestSandboxUid } from '@cordon/orchestrator-standin'
import {
  backendCreateRequest,
  endReasonOf,
  startTestOrchestrator,
  type TestOrchestratorStandin,
  testBackendContext,
} from '@cordon/test-support'
import Dockerode from 'dockerode'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import {
  type AgentSnapshotReference,
  ControlPlaneClient,
  createMicroVMBackend,
  createMicroVMSandboxProvider,
} from '../src/index.js'
import { refusingFront } from './refusing-front.js'

/**
 * The control plane's pause, resume and snapshot operations against the
 * stand-in, whose guests are real containers: the freezer and the captured
 * filesystem are the engine's, not a promise.
 */
const docker = new Dockerode()
const { context } = testBackendContext()
const request = backendCreateRequest

async function guestContainer(sandboxId: string): Promise<Dockerode.ContainerInspectInfo> {
  const [info] = await docker.listContainers({
    all: true,
    filters: { label: [`cordon.sandbox=${sandboxId}`] },
  })
  if (!info) throw new Error(`no container for ${sandboxId}`)
  return docker.getContainer(info.Id).inspect()
}

const errorOf = (promise: Promise<unknown>): Promise<unknown> =>
  promise.then(
    () => undefined,
    (caught: unknown) => caught,
  )

let versions = 0
const newRef = (): AgentSnapshotReference => ({
  orgId: 'org-test',
  agentId: 'agent-test',
  version: `v${process.pid}-${Date.now()}-${versions++}`,
})

describe('pause, resume and snapshots through the control plane (orchestrator stand-in)', () => {
  let standin: TestOrchestratorStandin
  let client: ControlPlaneClient
  let backend: CordonSandboxBackend
  const backendWith = (config: Partial<MicroVMBackendConfig> = {}): CordonSandboxBackend =>
    createMicroVMBackend({ ...standin.backendConfig(), ...config }, context)

  beforeAll(async () => {
    standin = await startTestOrchestrator()
    client = new ControlPlaneClient({
      endpoint: standin.url,
      getToken: async () => standin.token,
    })
    backend = backendWith()
  })
  afterAll(async () => {
    await backend?.close()
    await client?.close()
    await standin?.close()
  })

  it("pause freezes the guest's container with the engine's freezer, idempotently, and resume thaws it", async () => {
    const sandbox = await backend.create(request())
    try {
      await client.pauseSandbox(sandbox.id)
      expect((await guestContainer(sandbox.id)).State.Paused).toBe(true)
      const described = await fetch(`${standin.url}/v1/sandboxes/${sandbox.id}`, {
        headers: { authorization: `Bearer ${standin.token}` },
      })
      expect(await described.json()).toMatchObject({ state: 'paused' })
      await client.pauseSandbox(sandbox.id)
      expect((await guestContainer(sandbox.id)).State.Paused).toBe(true)
      await client.resumeSandbox(sandbox.id)
      await client.resumeSandbox(sandbox.id)
      expect((await guestContainer(sandbox.id)).State.Paused).toBe(false)
      expect((await sandbox.exec('echo', ['thawed'])).stdout).toBe('thawed\n')
    } finally {
      await sandbox.destroy()
    }
  })

  it('answers a malformed id, an unknown guest and a deleted one with typed errors', async () => {
    for (const call of [
      () => client.pauseSandbox('not-a-sandbox-id'),
      () => client.resumeSandbox('sbx_'),
      () => client.snapshotSandbox('../../v1', { agentSnapshot: newRef(), labels: {} }),
    ]) {
      const error = await errorOf(call())
      expect(SandboxOperationError.isInstance(error)).toBe(true)
      expect((error as Error).message).toMatch(/sandboxId|no route/)
    }

    const sandbox = await backend.create(request())
    const id = sandbox.id
    await sandbox.destroy()
    const unknown = `sbx_${'a'.repeat(26)}`
    for (const target of [id, unknown]) {
      for (const call of [
        () => client.pauseSandbox(target),
        () => client.resumeSandbox(target),
        () => client.snapshotSandbox(target, { agentSnapshot: newRef(), labels: {} }),
      ]) {
        const error = await errorOf(call())
        expect(SandboxDestroyedError.isInstance(error), String(error)).toBe(true)
        expect((error as SandboxDestroyedError).message).toContain(target)
      }
    }
    expect(standin.snapshots()).toEqual([])
  })

  it('a sandbox whose guest was removed behind the host cannot be paused and ends evicted; a destroyed one refuses pause', async () => {
    const provider = createMicroVMSandboxProvider({ backend: standin.backendConfig() })
    try {
      const sandbox = await provider.create()
      await client.deleteSandbox(sandbox.id)
      // The agent is gone before the control plane is asked: the dial fails, nothing is frozen.
      const error = await errorOf(sandbox.pause())
      expect(SandboxTransportError.isInstance(error), String(error)).toBe(true)
      expect(sandbox.paused).toBe(false)
      expect(await endReasonOf(sandbox)).toBe('evicted')

      // And a sandbox the host destroyed refuses a pause before anything is sent.
      const destroyed = await provider.create()
      await destroyed.destroy()
      const refused = await errorOf(destroyed.pause())
      expect(SandboxDestroyedError.isInstance(refused), String(refused)).toBe(true)
    } finally {
      await provider.close()
    }
  })

  it("a snapshot captures the guest's writable filesystem, and a create naming it as agentSnapshot starts from it", async () => {
    const source = await backend.create(request())
    const ref = newRef()
    let copy: Awaited<ReturnType<CordonSandboxBackend['create']>> | undefined
    const fromSnapshot = backendWith({ agentSnapshot: ref })
    try {
      await source.writeFile('notes/kept.txt', 'written before the snapshot')
      await source.exec('sh', ['-c', 'mkdir -p /tmp/work && echo scratch > /tmp/work/state'])
      const snapshot = await client.snapshotSandbox(source.id, {
        agentSnapshot: ref,
        labels: { 'cordon.managed': '1', 'cordon.provider': 'prv_snapshot_test' },
      })
      expect(snapshot).toMatchObject({
        agentSnapshot: ref,
        sourceSandboxId: source.id,
        memory: false,
        labels: { 'cordon.managed': '1', 'cordon.provider': 'prv_snapshot_test' },
      })
      expect(snapshot.sizeBytes).toBeGreaterThan(0)
      // The source goes on, and what it does afterwards is not in the snapshot.
      await source.writeFile('notes/after.txt', 'written after the snapshot')

      copy = await fromSnapshot.create(request())
      expect(copy.id).not.toBe(source.id)
      expect((await copy.readFile('notes/kept.txt')).toString()).toBe('written before the snapshot')
      expect((await copy.exec('cat', ['/tmp/work/state'])).stdout).toBe('scratch\n')
      expect((await copy.listFiles('notes')).map((entry) => entry.path)).toEqual([
        `${copy.rootDir}/notes/kept.txt`,
      ])
      // Independent: the copy's writes are its own.
      await copy.writeFile('notes/kept.txt', 'changed in the copy')
      expect((await source.readFile('notes/kept.txt')).toString()).toBe(
        'written before the snapshot',
      )
      // Its own guest under its own limits and user, which owns what was restored.
      expect((await copy.exec('id', ['-u'])).stdout).toBe(`${guestSandboxUid(copy.id)}\n`)
      expect((await copy.exec('stat', ['-c', '%u', `${copy.rootDir}/notes/kept.txt`])).stdout).toBe(
        `${guestSandboxUid(copy.id)}\n`,
      )
      expect((await guestContainer(copy.id)).HostConfig.ReadonlyRootfs).toBe(true)

      expect(
        (await client.listSnapshots({ 'cordon.provider': 'prv_snapshot_test' })).map(
          (listed) => listed.agentSnapshot,
        ),
      ).toContainEqual(ref)
      expect(await client.listSnapshots({ 'cordon.provider': 'prv_nobody' })).toEqual([])

      await client.deleteSnapshot(ref)
      await client.deleteSnapshot(ref)
      expect(standin.snapshots()).not.toContain(`${ref.orgId}/${ref.agentId}/${ref.version}`)
      const wanted = request()
      const missing = await errorOf(fromSnapshot.create(wanted))
      expect(SandboxOperationError.isInstance(missing)).toBe(true)
      expect((missing as Error).message).toMatch(/no snapshot/)
      expect(standin.guests()).not.toContain(wanted.id)
    } finally {
      await copy?.destroy()
      await source.destroy()
      await fromSnapshot.close()
      await client.deleteSnapshot(ref)
    }
  })

  it('refuses a memory snapshot, a snapshot of a paused guest, a reference taken or malformed, all with typed errors', async () => {
    const sandbox = await backend.create(request())
    const ref = newRef()
    try {
      const memory = await errorOf(
        client.snapshotSandbox(sandbox.id, { agentSnapshot: newRef(), memory: true, labels: {} }),
      )
      expect(SandboxControlRefusedError.isInstance(memory)).toBe(true)
      expect(memory).toMatchObject({ control: 'snapshot.memory', backend: 'microvm:self-hosted' })

      await client.pauseSandbox(sandbox.id)
      const paused = await errorOf(
        client.snapshotSandbox(sandbox.id, { agentSnapshot: newRef(), labels: {} }),
      )
      expect(SandboxOperationError.isInstance(paused)).toBe(true)
      expect((paused as Error).message).toMatch(/paused/)
      await client.resumeSandbox(sandbox.id)

      await client.snapshotSandbox(sandbox.id, { agentSnapshot: ref, labels: {} })
      const taken = await errorOf(
        client.snapshotSandbox(sandbox.id, { agentSnapshot: ref, labels: {} }),
      )
      expect(SandboxOperationError.isInstance(taken)).toBe(true)
      expect((taken as Error).message).toMatch(/already exists/)

      const malformed = await errorOf(
        client.snapshotSandbox(sandbox.id, {
          agentSnapshot: { orgId: 'a/b', agentId: '..', version: '' },
          labels: {},
        }),
      )
      expect(SandboxOperationError.isInstance(malformed)).toBe(true)
      expect((malformed as Error).message).toMatch(/orgId.*agentId.*version/)
      expect(standin.snapshots()).toEqual([`${ref.orgId}/${ref.agentId}/${ref.version}`])
      // The guest is unharmed by all of it.
      expect((await sandbox.exec('echo', ['fine'])).stdout).toBe('fine\n')
    } finally {
      await sandbox.destroy()
      await client.deleteSnapshot(ref)
    }
  })
})

describe('an orchestrator without a freezer', () => {
  it('refuses pause and resume with SandboxControlRefusedError naming the control', async () => {
    const server = createServer((req, res) => {
      const operation = req.url?.endsWith('/resume') ? 'resume' : 'pause'
      res.writeHead(422, { 'content-type': 'application/json' }).end(
        JSON.stringify({
          error: {
            code: 'control-refused',
            message: 'refused',
            control: operation,
            reason: 'this orchestrator cannot freeze a guest',
          },
        }),
      )
    })
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
    const client = new ControlPlaneClient({
      endpoint: `http://127.0.0.1:${(server.address() as { port: number }).port}`,
      getToken: async () => 't',
    })
    try {
      for (const [control, call] of [
        ['pause', () => client.pauseSandbox(`sbx_${'c'.repeat(26)}`)],
        ['resume', () => client.resumeSandbox(`sbx_${'c'.repeat(26)}`)],
      ] as const) {
        const error = await errorOf(call())
        expect(SandboxControlRefusedError.isInstance(error)).toBe(true)
        expect(error).toMatchObject({ control, backend: 'microvm:self-hosted' })
        expect((error as Error).message).toContain('cannot freeze')
      }
    } finally {
      await client.close()
      server.closeAllConnections()
      await new Promise((resolve) => server.close(resolve))
    }
  })
})

describe("cordon's snapshots on the microVM backend (orchestrator stand-in)", () => {
  let standin: TestOrchestratorStandin
  beforeAll(async () => {
    standin = await startTestOrchestrator()
  })
  afterAll(async () => {
    await standin?.close()
  })

  it("snapshot() is the control plane's snapshot under a snp_ id; create({ snapshot }) starts from it with the source's limits; snapshots are listed and removed", async () => {
    const provider = createMicroVMSandboxProvider({ backend: standin.backendConfig() })
    try {
      const source = await provider.create({ memoryLimitMb: 200, maxProcesses: 40 })
      await source.writeFile('kept.txt', 'from the source')
      const snapshot = await source.snapshot()
      expect(snapshot).toMatchObject({
        backend: 'microvm:self-hosted',
        sourceSandboxId: source.id,
        memory: false,
        limits: { memoryLimitMb: 200, maxProcesses: 40 },
        egress: { kind: 'deny-all' },
      })
      expect(snapshot.id).toMatch(/^snp_[a-z2-7]{26}$/)
      // On the control plane: the reference a create's agentSnapshot names, with the owner's labels.
      expect(standin.snapshots()).toEqual([`cordon/cordon/${snapshot.id}`])

      const restored = await provider.create({ snapshot: snapshot.id })
      expect((await restored.readFile('kept.txt')).toString()).toBe('from the source')
      const guest = await guestContainer(restored.id)
      expect(guest.HostConfig.Memory).toBe(200 * 1024 * 1024)
      expect(guest.HostConfig.PidsLimit).toBe(40)
      expect(restored.enforced.limits).toMatchObject({ memoryLimitMb: 200, maxProcesses: 40 })

      expect((await provider.snapshots.list()).map((listed) => listed.id)).toEqual([snapshot.id])
      await provider.snapshots.remove(snapshot.id)
      expect(standin.snapshots()).toEqual([])
      const again = await errorOf(provider.snapshots.remove(snapshot.id))
      expect(SandboxSnapshotNotFoundError.isInstance(again)).toBe(true)
      // Sandboxes made from it go on.
      expect((await restored.exec('cat', ['kept.txt'])).stdout).toBe('from the source')

      await source.pause()
      const paused = await errorOf(source.snapshot())
      expect(SandboxPausedError.isInstance(paused)).toBe(true)
      await source.resume()
      const memory = await errorOf(source.snapshot({ memory: true }))
      expect(memory).toMatchObject({ control: 'snapshot.memory', backend: 'microvm:self-hosted' })
    } finally {
      await provider.close()
    }
    expect(standin.guests()).toEqual([])
  })
})

describe('snapshot retention on the control plane (orchestrator stand-in)', () => {
  let standin: TestOrchestratorStandin
  beforeAll(async () => {
    standin = await startTestOrchestrator()
  })
  afterAll(async () => {
    await standin?.close()
  })

  it("a provider's first create removes cordon's snapshots older than snapshotRetentionMs, and nobody else's", async () => {
    const taker = createMicroVMSandboxProvider({ backend: standin.backendConfig() })
    const client = new ControlPlaneClient({
      endpoint: standin.url,
      getToken: async () => standin.token,
    })
    const foreign = newRef()
    try {
      const source = await taker.create()
      const snapshot = await source.snapshot()
      // A snapshot someone else took through the control plane, of the same guest.
      await client.snapshotSandbox(source.id, { agentSnapshot: foreign, labels: {} })
      await source.destroy()
      // A second provider whose retention the snapshot has outlived.
      await new Promise((resolve) => setTimeout(resolve, 50))
      const sweeper = createMicroVMSandboxProvider({
        backend: { ...standin.backendConfig(), snapshotRetentionMs: 10 },
      })
      try {
        const sandbox = await sweeper.create()
        await sandbox.destroy()
        // The sweep runs in the background of the create; close() would stop it.
        for (let waited = 0; standin.snapshots().length > 1 && waited < 10_000; waited += 100)
          await new Promise((resolve) => setTimeout(resolve, 100))
      } finally {
        await sweeper.close()
      }
      expect(standin.snapshots()).toEqual([
        `${foreign.orgId}/${foreign.agentId}/${foreign.version}`,
      ])
      const gone = await errorOf(taker.snapshots.remove(snapshot.id))
      expect(SandboxSnapshotNotFoundError.isInstance(gone)).toBe(true)
    } finally {
      await client.deleteSnapshot(foreign)
      await client.close()
      await taker.close()
    }
  })

  it('a retention sweep that failed is run again by the next create', async () => {
    const taker = createMicroVMSandboxProvider({ backend: standin.backendConfig() })
    // The sweep's listing of cordon's snapshots is refused once.
    const front = await refusingFront(
      standin.backendConfig().orchestratorEndpoint,
      1,
      (method, url) => method === 'GET' && url.pathname === '/v1/snapshots',
    )
    const sweeper = createMicroVMSandboxProvider({
      backend: {
        ...standin.backendConfig(),
        orchestratorEndpoint: front.endpoint,
        snapshotRetentionMs: 10,
      },
    })
    const within = async (check: () => boolean, ms: number): Promise<boolean> => {
      for (let waited = 0; !check() && waited < ms; waited += 100)
        await new Promise((resolve) => setTimeout(resolve, 100))
      return check()
    }
    try {
      const source = await taker.create()
      await source.snapshot()
      await source.destroy()
      await new Promise((resolve) => setTimeout(resolve, 50))
      const first = await sweeper.create()
      expect(await within(() => front.refused() === 1, 10_000)).toBe(true)
      await first.destroy()
      // The refused sweep removed nothing, and nothing started it again by itself.
      await new Promise((resolve) => setTimeout(resolve, 1_000))
      expect(standin.snapshots()).toHaveLength(1)
      const second = await sweeper.create()
      await second.destroy()
      expect(
        await within(() => standin.snapshots().length === 0, 10_000),
        "the second create's sweep removed the expired snapshot",
      ).toBe(true)
    } finally {
      await sweeper.close()
      await front.close()
      await taker.close()
    }
  })
})
