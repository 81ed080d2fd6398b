import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http'
import type { MicroVMBackendConfig } from '@cordon/builtin-backends'
import {
  type EgressPolicy,
  SandboxAbortedError,
  SandboxBackendUnavailableError,
  SandboxControlRefusedError,
  SandboxCreateTimeoutError,
  SandboxDestroyedError,
  SandboxOperationError,
  SandboxReadinessError,
  SandboxTransportError,
} from '@cordon/core'
import type { CordonSandboxBackend } from '@cordon/core/backend'
import { guestSandboxUid } from '@cordon/orchestrator-standin'
import {
  backendCreateRequest,
  startTestOrchestrator,
  type TestOrchestratorStandin,
  testBackendContext,
} from '@cordon/test-support'
import Dockerode from 'dockerode'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { createMicroVMBackend, encodeEgressAllowlist } from '../src/index.js'
import { type HostAgent, makeTestPki, startHostAgent } from './host-agent.js'

const docker = new Dockerode()

const { context } = testBackendContext()
const request = backendCreateRequest

function backendFor(
  config: Partial<MicroVMBackendConfig> & {
    orchestratorEndpoint: string
    getToken: () => Promise<string>
  },
): CordonSandboxBackend {
  return createMicroVMBackend({ tier: 'microvm', service: 'self-hosted', ...config }, context)
}

async function containersOf(sandboxId: string): Promise<number> {
  return (
    await docker.listContainers({ all: true, filters: { label: [`cordon.sandbox=${sandboxId}`] } })
  ).length
}

describe('egress allowlist encoding', () => {
  // Resolver answers are covered, case by case, in resolver-rule.test.ts.
  const encode = (policy: EgressPolicy) =>
    encodeEgressAllowlist(policy, new AbortController().signal)
  it('omits it for allow-all, sends [] for deny-all and the list for static', async () => {
    expect(await encode({ kind: 'allow-all' })).toBeUndefined()
    expect(await encode({ kind: 'deny-all' })).toEqual([])
    expect(
      await encode({ kind: 'static', allowedHosts: ['api.example.com', '.example.org'] }),
    ).toEqual(['api.example.com', '.example.org'])
  })
})

describe('control plane through the orchestrator stand-in', () => {
  let standin: TestOrchestratorStandin
  beforeAll(async () => {
    standin = await startTestOrchestrator()
  })
  afterAll(async () => {
    await standin?.close()
  })

  it('fetches the token for every call, creates a guest that is exec-ready, and deletes it', async () => {
    let tokenCalls = 0
    const backend = backendFor({
      orchestratorEndpoint: standin.url,
      getToken: async () => {
        tokenCalls++
        return standin.token
      },
    })
    try {
      const wanted = request({ env: { FROM_HOST: 'yes' } })
      const sandbox = await backend.create(wanted)
      // Four calls: a backend's first create lists its snapshots for the
      // retention sweep, its detached guests for theirs and this machine's
      // guests for the sweep of gone hosts' (gone-owner-sweep.ts), then creates the guest.
      expect(tokenCalls).toBe(4)
      expect(sandbox.status).toBe('ready')
      expect(await containersOf(wanted.id)).toBe(1)
      // Commands run under the guest's own uid, not the agent's (README: guest requirements).
      expect((await sandbox.exec('sh', ['-c', 'echo $FROM_HOST; id -u'])).stdout).toBe(
        `yes\n${guestSandboxUid(wanted.id)}\n`,
      )
      await sandbox.destroy()
      await sandbox.destroy()
      expect(tokenCalls).toBe(5)
      expect(await containersOf(wanted.id)).toBe(0)
      expect(
        SandboxDestroyedError.isInstance(
          await sandbox.exec('true').catch((caught: unknown) => caught),
        ),
      ).toBe(true)
    } finally {
      await backend.close()
    }
  })

  it('turns a refused token, or a getToken that throws, into SandboxBackendUnavailableError', async () => {
    const wrong = backendFor({
      orchestratorEndpoint: standin.url,
      getToken: async () => 'not-the-token',
    })
    const refused = await wrong.create(request()).catch((caught: unknown) => caught)
    expect(SandboxBackendUnavailableError.isInstance(refused)).toBe(true)
    expect((refused as Error).message).toMatch(/bearer token/)
    const broken = backendFor({
      orchestratorEndpoint: standin.url,
      getToken: async () => Promise.reject(new Error('vault sealed')),
    })
    const failed = await broken.create(request()).catch((caught: unknown) => caught)
    expect(SandboxBackendUnavailableError.isInstance(failed)).toBe(true)
    expect(((failed as Error).cause as Error).message).toBe('vault sealed')
    await Promise.all([wrong.close(), broken.close()])
    expect(standin.guests()).toEqual([])
  })

  it('refuses every egress policy the stand-in cannot enforce, naming the control and the backend', async () => {
    const backend = backendFor({
      orchestratorEndpoint: standin.url,
      getToken: async () => standin.token,
    })
    try {
      const policies: EgressPolicy[] = [
        { kind: 'allow-all' },
        { kind: 'static', allowedHosts: ['api.example.com'] },
        { kind: 'resolver', resolve: async () => ['api.example.com'] },
      ]
      for (const egress of policies) {
        const wanted = request({ egress })
        const error = await backend.create(wanted).catch((caught: unknown) => caught)
        expect(SandboxControlRefusedError.isInstance(error), egress.kind).toBe(true)
        expect(error).toMatchObject({
          control: `egress.${egress.kind}`,
          backend: 'microvm:self-hosted',
        })
        expect(await containersOf(wanted.id)).toBe(0)
      }
    } finally {
      await backend.close()
    }
  })

  it('deletes the guest when create is aborted mid-way', async () => {
    const backend = backendFor({
      orchestratorEndpoint: standin.url,
      getToken: async () => standin.token,
    })
    try {
      const controller = new AbortController()
      const wanted = request({ signal: controller.signal })
      const pending = backend.create(wanted)
      setTimeout(() => controller.abort(), 150)
      expect(SandboxAbortedError.isInstance(await pending.catch((caught: unknown) => caught))).toBe(
        true,
      )
      // The stand-in finishes creating, sees the delete, and removes the container.
      const until = Date.now() + 10_000
      while (
        (standin.guests().includes(wanted.id) || (await containersOf(wanted.id)) > 0) &&
        Date.now() < until
      ) {
        await new Promise((resolve) => setTimeout(resolve, 100))
      }
      expect(await containersOf(wanted.id)).toBe(0)
    } finally {
      await backend.close()
    }
  })

  it('runs the agent leg and the control plane over mutual TLS', async () => {
    const pki = await makeTestPki()
    const secure = await startTestOrchestrator({
      tls: { cert: pki.serverCert, key: pki.serverKey, ca: pki.ca },
      agentRelay: { cert: pki.serverCert, key: pki.serverKey, ca: pki.ca },
      host: '127.0.0.1',
    })
    const client = { cert: pki.clientCert, key: pki.clientKey, ca: pki.ca, servername: 'localhost' }
    const backend = backendFor({
      orchestratorEndpoint: secure.url,
      getToken: async () => secure.token,
      controlPlaneMtls: client,
      mtls: client,
    })
    const withoutClientCert = backendFor({
      orchestratorEndpoint: secure.url,
      getToken: async () => secure.token,
      controlPlaneMtls: { ...client, cert: pki.strangerCert, key: pki.strangerKey },
    })
    try {
      const sandbox = await backend.create(request())
      expect((await sandbox.exec('echo', ['over mtls'])).stdout).toBe('over mtls\n')
      await sandbox.destroy()
      const refused = await withoutClientCert.create(request()).catch((caught: unknown) => caught)
      expect(SandboxTransportError.isInstance(refused)).toBe(true)
    } finally {
      await Promise.all([backend.close(), withoutClientCert.close()])
      await secure.close()
      await pki.cleanup()
    }
  })
})

/** A scripted control plane, for failures the stand-in does not produce on purpose. */
async function fakeControlPlane(
  onCreate: (body: Record<string, unknown>, res: ServerResponse) => void,
): Promise<{ url: string; deletes: string[]; close(): Promise<void> }> {
  const deletes: string[] = []
  const server: Server = createServer((req: IncomingMessage, res: ServerResponse) => {
    const chunks: Buffer[] = []
    req.on('data', (chunk: Buffer) => chunks.push(chunk))
    req.on('end', () => {
      if (req.method === 'DELETE') {
        deletes.push(decodeURIComponent(req.url!.split('/').pop()!))
        res.writeHead(204).end()
        return
      }
      // A backend's first create also lists, in the background, its snapshots
      // (retention sweep) and its detached guests (their sweep): this control plane has none.
      if (req.method === 'GET' && req.url!.startsWith('/v1/snapshots')) {
        res.writeHead(200, { 'content-type': 'application/json' }).end('{"snapshots":[]}')
        return
      }
      if (req.method === 'GET' && req.url!.startsWith('/v1/sandboxes?')) {
        res.writeHead(200, { 'content-type': 'application/json' }).end('{"sandboxes":[]}')
        return
      }
      onCreate(JSON.parse(Buffer.concat(chunks).toString()), res)
    })
  })
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  return {
    url: `http://127.0.0.1:${(server.address() as { port: number }).port}`,
    deletes,
    close: () =>
      new Promise((resolve) => {
        server.closeAllConnections()
        server.close(() => resolve())
      }),
  }
}

describe('create failure handling (scripted control plane)', () => {
  let agent: HostAgent
  beforeAll(async () => {
    agent = await startHostAgent()
  })
  afterAll(async () => {
    await agent?.stop()
  })

  const json = (res: ServerResponse, status: number, body: unknown): void => {
    res.writeHead(status, { 'content-type': 'application/json' }).end(JSON.stringify(body))
  }

  it('an agent that refuses the secret fails readiness and the guest is deleted', async () => {
    const plane = await fakeControlPlane((body, res) =>
      json(res, 201, {
        sandboxId: body.sandboxId,
        rootDir: '/out',
        agent: { kind: 'unix', path: agent.socketPath },
      }),
    )
    const backend = backendFor({ orchestratorEndpoint: plane.url, getToken: async () => 't' })
    try {
      const wanted = request()
      const error = await backend.create(wanted).catch((caught: unknown) => caught)
      expect(SandboxReadinessError.isInstance(error)).toBe(true)
      expect(plane.deletes).toEqual([wanted.id])
    } finally {
      await backend.close()
      await plane.close()
    }
  })

  it('a guest whose agent runs commands under its own uid is refused with SandboxReadinessError and deleted', async () => {
    // The real agent holding the create's secret, without CORDON_AGENT_RUN_AS:
    // its commands would share its uid (README: guest requirements).
    let sameUid: HostAgent | undefined
    const plane = await fakeControlPlane((body, res) => {
      void startHostAgent({ secret: String(body.agentSecret) }).then((started) => {
        sameUid = started
        json(res, 201, {
          sandboxId: body.sandboxId,
          rootDir: started.dir,
          agent: { kind: 'unix', path: started.socketPath },
        })
      })
    })
    const backend = backendFor({ orchestratorEndpoint: plane.url, getToken: async () => 't' })
    try {
      const wanted = request()
      const error = await backend.create(wanted).catch((caught: unknown) => caught)
      expect(SandboxReadinessError.isInstance(error)).toBe(true)
      expect((error as Error).message).toMatch(/CORDON_AGENT_RUN_AS/)
      expect(plane.deletes).toEqual([wanted.id])
    } finally {
      await backend.close()
      await plane.close()
      await sameUid?.stop()
    }
  })

  it('a control plane that never answers hits the readiness budget, and the guest is deleted by id', async () => {
    const plane = await fakeControlPlane(() => {})
    const backend = backendFor({
      orchestratorEndpoint: plane.url,
      getToken: async () => 't',
      readyTimeoutMs: 500,
    })
    try {
      const wanted = request()
      const error = await backend.create(wanted).catch((caught: unknown) => caught)
      expect(SandboxCreateTimeoutError.isInstance(error)).toBe(true)
      expect(error).toMatchObject({ timeoutMs: 500, phase: 'control-plane.create' })
      expect(plane.deletes).toEqual([wanted.id])
    } finally {
      await backend.close()
      await plane.close()
    }
  })

  it('an agent that never answers hits the readiness budget during agent.health', async () => {
    const plane = await fakeControlPlane((body, res) =>
      json(res, 201, {
        sandboxId: body.sandboxId,
        rootDir: '/out',
        agent: { kind: 'unix', path: '/nonexistent/agent.sock' },
      }),
    )
    const backend = backendFor({
      orchestratorEndpoint: plane.url,
      getToken: async () => 't',
      readyTimeoutMs: 700,
    })
    try {
      const error = await backend.create(request()).catch((caught: unknown) => caught)
      expect(error).toMatchObject({ phase: 'agent.health' })
      expect(plane.deletes).toHaveLength(1)
    } finally {
      await backend.close()
      await plane.close()
    }
  })

  it('translates server errors and unusable responses', async () => {
    const answers: Array<[number, unknown, (error: unknown) => boolean]> = [
      [
        503,
        { error: { code: 'unavailable', message: 'no capacity' } },
        (error) => SandboxBackendUnavailableError.isInstance(error),
      ],
      [
        400,
        { error: { code: 'invalid-request', message: 'bad template' } },
        (error) => SandboxOperationError.isInstance(error),
      ],
      [
        201,
        { sandboxId: 'sbx_someoneelse', rootDir: '/out', agent: { kind: 'unix', path: '/x' } },
        (error) => SandboxTransportError.isInstance(error),
      ],
      [
        201,
        { sandboxId: 'ignored', rootDir: '/out', agent: { kind: 'carrier-pigeon' } },
        (error) => SandboxTransportError.isInstance(error),
      ],
    ]
    for (const [status, body, check] of answers) {
      const plane = await fakeControlPlane((received, res) => {
        const payload = body as { sandboxId?: string }
        json(
          res,
          status,
          payload.sandboxId === 'ignored' ? { ...payload, sandboxId: received.sandboxId } : payload,
        )
      })
      const backend = backendFor({ orchestratorEndpoint: plane.url, getToken: async () => 't' })
      try {
        const error = await backend.create(request()).catch((caught: unknown) => caught)
        expect(check(error), `${status} ${JSON.stringify(body)}: ${String(error)}`).toBe(true)
        expect(plane.deletes).toHaveLength(1)
      } finally {
        await backend.close()
        await plane.close()
      }
    }
  })

  it('sends the request the OpenAPI file describes', async () => {
    let seen: Record<string, unknown> | undefined
    const plane = await fakeControlPlane((body, res) => {
      seen = body
      json(res, 422, {
        error: { code: 'control-refused', message: 'no', control: 'egress', reason: 'test' },
      })
    })
    const backend = backendFor({
      orchestratorEndpoint: plane.url,
      getToken: async () => 't',
      template: 'python-3.12',
      agentSnapshot: { orgId: 'o', agentId: 'a', version: '7' },
      agentVsockPort: 5000,
    })
    try {
      const wanted = request({
        egress: { kind: 'static', allowedHosts: ['pypi.org'] },
        lifetimeMs: 60_000,
        memoryLimitMb: 300,
        maxProcesses: 50,
      })
      await backend.create(wanted).catch(() => {})
      expect(seen).toMatchObject({
        sandboxId: wanted.id,
        template: 'python-3.12',
        agentSnapshot: { orgId: 'o', agentId: 'a', version: '7' },
        memoryLimitMb: 300,
        maxProcesses: 50,
        timeoutMs: 60_000,
        egressAllowlist: ['pypi.org'],
        agentVsockPort: 5000,
        labels: {
          'cordon.managed': '1',
          'cordon.provider': 'prv_test',
          'cordon.sandbox': wanted.id,
        },
      })
      expect(typeof seen?.agentSecret).toBe('string')
      expect(String(seen?.agentSecret ?? '').length).toBeGreaterThanOrEqual(32)
    } finally {
      await backend.close()
      await plane.close()
    }
  })
})
