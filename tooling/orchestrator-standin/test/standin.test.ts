import { connect } from 'node:net'
import { newAgentSecret } from '@cordon/agent/protocol'
import Dockerode from 'dockerode'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import {
  guestSandboxUid,
  type OrchestratorStandin,
  startOrchestratorStandin,
} from '../src/index.js'

const docker = new Dockerode()
const token = newAgentSecret()
// @cordon/test-support's run label: that package depends on this one, so its tests cannot import it.
const runLabels = { 'cordon-test.run': process.env.CORDON_TEST_RUN_ID ?? `local-${process.pid}` }

function sandboxId(): string {
  const alphabet = 'abcdefghijklmnopqrstuvwxyz234567'
  let id = 'sbx_'
  for (let i = 0; i < 26; i++) id += alphabet[Math.floor(Math.random() * 32)]
  return id
}

function createBody(overrides: Record<string, unknown> = {}): Record<string, unknown> {
  return {
    sandboxId: sandboxId(),
    memoryLimitMb: 128,
    maxProcesses: 32,
    egressAllowlist: [],
    agentVsockPort: 1024,
    agentSecret: newAgentSecret(),
    labels: { 'cordon.provider': 'prv_standin_test' },
    ...overrides,
  }
}

/** Sends `CONNECT <port>\n` to a vsock socket and returns the first line of the reply, or null if it closed without one. */
function vsockConnectLine(udsPath: string, port: number): Promise<string | null> {
  return new Promise((resolve) => {
    const socket = connect(udsPath)
    let received = ''
    socket.on('connect', () => socket.write(`CONNECT ${port}\n`))
    socket.on('data', (chunk: Buffer) => {
      received += chunk.toString('latin1')
      const newline = received.indexOf('\n')
      if (newline !== -1) {
        resolve(received.slice(0, newline))
        socket.destroy()
      }
    })
    socket.on('close', () => resolve(null))
    socket.on('error', () => resolve(null))
  })
}

describe('orchestrator stand-in', () => {
  let standin: OrchestratorStandin
  const call = (method: string, path: string, body?: unknown, bearer = token): Promise<Response> =>
    fetch(`${standin.url}${path}`, {
      method,
      headers: { authorization: `Bearer ${bearer}`, 'content-type': 'application/json' },
      ...(body === undefined ? {} : { body: JSON.stringify(body) }),
    })

  beforeAll(async () => {
    standin = await startOrchestratorStandin({ token, labels: runLabels })
  })
  afterAll(async () => {
    await standin?.close()
  })

  it('refuses a missing or wrong bearer token', async () => {
    const wrong = await call('POST', '/v1/sandboxes', createBody(), 'nope')
    expect(wrong.status).toBe(401)
    expect(await wrong.json()).toMatchObject({ error: { code: 'unauthorized' } })
    const none = await fetch(`${standin.url}/v1/sandboxes/sbx_x`, { method: 'DELETE' })
    expect(none.status).toBe(401)
    expect(standin.guests()).toEqual([])
  })

  it('lists every problem of an invalid request', async () => {
    const response = await call('POST', '/v1/sandboxes', {
      sandboxId: 'nope',
      memoryLimitMb: 1,
      agentSecret: 'short',
    })
    expect(response.status).toBe(400)
    const { error } = (await response.json()) as { error: { code: string; message: string } }
    expect(error.code).toBe('invalid-request')
    for (const field of [
      'sandboxId',
      'memoryLimitMb',
      'maxProcesses',
      'agentVsockPort',
      'agentSecret',
    ])
      expect(error.message).toContain(field)
  })

  it('refuses egress it cannot enforce with control-refused', async () => {
    for (const egressAllowlist of [undefined, ['example.com']]) {
      const response = await call('POST', '/v1/sandboxes', createBody({ egressAllowlist }))
      expect(response.status).toBe(422)
      expect(await response.json()).toMatchObject({
        error: { code: 'control-refused', control: 'egress' },
      })
    }
  })

  it('starts a hardened, labelled guest behind a vsock socket, and deletes it', async () => {
    const body = createBody()
    const response = await call('POST', '/v1/sandboxes', body)
    expect(response.status).toBe(201)
    const created = (await response.json()) as {
      sandboxId: string
      rootDir: string
      agent: { kind: string; udsPath: string; port: number }
    }
    expect(created).toMatchObject({
      sandboxId: body.sandboxId,
      rootDir: '/mnt/user-data/outputs',
      agent: { kind: 'vsock', port: 1024 },
    })

    const [info] = await docker.listContainers({
      all: true,
      filters: { label: [`cordon.sandbox=${String(body.sandboxId)}`] },
    })
    const inspected = await docker.getContainer(info!.Id).inspect()
    // The agent is root; its commands run as the per-sandbox uid it names (README).
    expect(inspected.Config.User).toBe('0:0')
    const uid = guestSandboxUid(String(body.sandboxId))
    expect(uid).toBeGreaterThanOrEqual(2 ** 30)
    expect(inspected.Config.Env).toContain(`CORDON_AGENT_RUN_AS=${uid}:${uid}`)
    expect(inspected.Config.Labels).toMatchObject({
      'cordon.managed': '1',
      'cordon.standin': standin.id,
      'cordon.provider': 'prv_standin_test',
      ...runLabels,
    })
    expect(inspected.Config.Env.join('\n')).not.toContain(String(body.agentSecret))
    const host = inspected.HostConfig
    expect(host.CapDrop).toEqual(['ALL'])
    expect(host.CapAdd?.sort()).toEqual(['DAC_OVERRIDE', 'KILL', 'SETGID', 'SETUID'])
    expect(host.SecurityOpt).toEqual(['no-new-privileges'])
    expect(host.ReadonlyRootfs).toBe(true)
    expect(host.NetworkMode).toBe('none')
    expect(host.PidsLimit).toBe(32)
    expect(host.Memory).toBe(128 * 1024 * 1024)
    expect(host.MemorySwap).toBe(host.Memory)
    expect(host.Init).toBe(true)
    expect(host.Privileged).toBe(false)
    expect(Object.keys(host.Tmpfs ?? {}).sort()).toEqual(['/mnt/user-data/outputs', '/tmp'])
    expect(JSON.stringify(host.Binds)).not.toContain('docker.sock')

    // Firecracker's behaviour: no reply for a port nobody listens on, OK for the agent's once it is up.
    expect(await vsockConnectLine(created.agent.udsPath, 4321)).toBeNull()
    let line: string | null = null
    // Up to 30 s: the guest's agent starts in a gVisor container, which a loaded machine slows.
    for (let i = 0; i < 600 && line === null; i++) {
      line = await vsockConnectLine(created.agent.udsPath, 1024)
      if (line === null) await new Promise((resolve) => setTimeout(resolve, 50))
    }
    expect(line).toMatch(/^OK \d+$/)

    expect((await call('GET', `/v1/sandboxes/${String(body.sandboxId)}`)).status).toBe(200)
    expect((await call('DELETE', `/v1/sandboxes/${String(body.sandboxId)}`)).status).toBe(204)
    expect((await call('DELETE', `/v1/sandboxes/${String(body.sandboxId)}`)).status).toBe(404)
    expect(
      await docker.listContainers({
        all: true,
        filters: { label: [`cordon.sandbox=${String(body.sandboxId)}`] },
      }),
    ).toEqual([])
  })

  it("does not count a paused guest's time toward its lifetime, and removes it once the rest has run out", async () => {
    // The stand-in gives a guest timeoutMs plus 5 s: here 6 s.
    const body = createBody({ timeoutMs: 1_000 })
    const id = String(body.sandboxId)
    expect((await call('POST', '/v1/sandboxes', body)).status).toBe(201)
    const paused = await call('POST', `/v1/sandboxes/${id}/pause`)
    expect(paused.status).toBe(200)
    expect(await paused.json()).toEqual({ sandboxId: id, state: 'paused' })
    const [info] = await docker.listContainers({
      all: true,
      filters: { label: [`cordon.sandbox=${id}`] },
    })
    expect((await docker.getContainer(info!.Id).inspect()).State.Paused).toBe(true)
    await new Promise((resolve) => setTimeout(resolve, 8_000))
    const described = await call('GET', `/v1/sandboxes/${id}`)
    expect(described.status).toBe(200)
    expect(await described.json()).toMatchObject({ state: 'paused' })
    const resumed = await call('POST', `/v1/sandboxes/${id}/resume`)
    expect(await resumed.json()).toEqual({ sandboxId: id, state: 'running' })
    const until = Date.now() + 30_000
    while ((await call('GET', `/v1/sandboxes/${id}`)).status === 200 && Date.now() < until)
      await new Promise((resolve) => setTimeout(resolve, 250))
    expect((await call('GET', `/v1/sandboxes/${id}`)).status).toBe(404)
    expect(
      await docker.listContainers({ all: true, filters: { label: [`cordon.sandbox=${id}`] } }),
    ).toEqual([])
  }, 60_000)

  it('answers pause, resume and snapshot requests it cannot serve with the error the spec names', async () => {
    const missing = `sbx_${'b'.repeat(26)}`
    for (const operation of ['pause', 'resume', 'snapshots']) {
      const unknown = await call('POST', `/v1/sandboxes/${missing}/${operation}`, {})
      expect(unknown.status, operation).toBe(404)
      expect(await unknown.json()).toMatchObject({ error: { code: 'not-found' } })
      const malformed = await call('POST', `/v1/sandboxes/nope/${operation}`, {})
      expect(malformed.status, operation).toBe(400)
      expect(await malformed.json()).toMatchObject({ error: { code: 'invalid-request' } })
      expect((await call('GET', `/v1/sandboxes/${missing}/${operation}`)).status).toBe(405)
    }
    const body = createBody()
    const id = String(body.sandboxId)
    expect((await call('POST', '/v1/sandboxes', body)).status).toBe(201)
    try {
      const invalid = await call('POST', `/v1/sandboxes/${id}/snapshots`, {
        agentSnapshot: { orgId: '', agentId: 'a/b' },
        memory: 'yes',
        labels: [],
      })
      expect(invalid.status).toBe(400)
      const { error } = (await invalid.json()) as { error: { message: string } }
      for (const field of ['orgId', 'agentId', 'version', 'memory', 'labels'])
        expect(error.message).toContain(field)
      const fromNothing = await call(
        'POST',
        '/v1/sandboxes',
        createBody({ agentSnapshot: { orgId: 'o', agentId: 'a', version: 'never-made' } }),
      )
      expect(fromNothing.status).toBe(404)
      expect(await fromNothing.json()).toMatchObject({ error: { code: 'not-found' } })
      expect((await call('GET', '/v1/snapshots?label=nonsense')).status).toBe(400)
      expect(await (await call('GET', '/v1/snapshots')).json()).toEqual({ snapshots: [] })
      expect((await call('DELETE', '/v1/snapshots/o/a/never-made')).status).toBe(404)
    } finally {
      await call('DELETE', `/v1/sandboxes/${id}`)
    }
  })

  it('removes every guest it made when it closes', async () => {
    const own = await startOrchestratorStandin({ token, labels: runLabels })
    const ids = [createBody(), createBody()]
    for (const body of ids) {
      const response = await fetch(`${own.url}/v1/sandboxes`, {
        method: 'POST',
        headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' },
        body: JSON.stringify(body),
      })
      expect(response.status).toBe(201)
    }
    expect(own.guests()).toHaveLength(2)
    await own.close()
    expect(
      await docker.listContainers({ all: true, filters: { label: [`cordon.standin=${own.id}`] } }),
    ).toEqual([])
  })
})
