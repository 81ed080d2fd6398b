import { createServer, type Server } from 'node:net'
import { join } from 'node:path'
import {
  SandboxConfigValidationError,
  SandboxCreateTimeoutError,
  SandboxTransportError,
} from '@cordon/core'
import { startMtlsRelay, startVsockRelay } from '@cordon/orchestrator-standin'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { VsockAgentTransport } from '../src/index.js'
import { type HostAgent, makeTestPki, startHostAgent, type TestPki } from './host-agent.js'

// Tuned so failing dials give up quickly in tests.
const fast = { maxConnectAttempts: 3, retryDelayMs: 20, connectTimeoutMs: 2_000 }

async function* bytes(text: string): AsyncGenerator<Uint8Array> {
  yield new TextEncoder().encode(text)
}

describe('VsockAgentTransport', () => {
  let agent: HostAgent
  let relay: { close(): Promise<void> }
  let vsockPath: string
  beforeAll(async () => {
    agent = await startHostAgent()
    vsockPath = join(agent.dir, 'v.sock')
    relay = await startVsockRelay({
      udsPath: vsockPath,
      agentPort: 1024,
      agentSocketPath: agent.socketPath,
    })
  })
  afterAll(async () => {
    await relay?.close()
    await agent?.stop()
  })

  it('talks to the agent over a plain unix socket', async () => {
    const transport = new VsockAgentTransport(
      { kind: 'unix', path: agent.socketPath },
      { secret: agent.secret, ...fast },
    )
    expect((await transport.health()).type).toBe('health-ok')
  })

  it("completes Firecracker's CONNECT/OK handshake, then runs commands and moves files", async () => {
    const transport = new VsockAgentTransport(
      { kind: 'vsock', udsPath: vsockPath },
      { secret: agent.secret, ...fast },
    )
    expect(transport.description).toBe(`vsock:${vsockPath}#1024`)
    let out = ''
    const session = await transport.client.startExec(
      { command: 'echo', args: ['through vsock'], env: {}, stdin: false },
      {
        onStdout: (chunk) => (out += Buffer.from(chunk).toString()),
      },
    )
    expect((await session.result).exitCode).toBe(0)
    expect(out).toBe('through vsock\n')
    const path = join(agent.dir, 'out/hello.txt')
    await transport.client.writeFile(path, bytes('hi'), {})
    const download = await transport.client.readFile(path)
    const chunks: Uint8Array[] = []
    for await (const chunk of download.chunks) chunks.push(chunk)
    expect(Buffer.concat(chunks).toString()).toBe('hi')
    expect(
      (await transport.client.listFiles(join(agent.dir, 'out'))).map((entry) => entry.path),
    ).toContain(path)
  })

  it("has the reference's methods: healthz, waitForReady, execute, writeFile(Buffer), readFile -> Buffer", async () => {
    const transport = new VsockAgentTransport(
      { kind: 'vsock', udsPath: vsockPath, port: 1024 },
      {
        secret: agent.secret,
        connectTimeoutMs: 2_000,
        connectRetryBudgetMs: 1_000,
        connectRetryIntervalMs: 50,
        readIdleTimeoutMs: 4_000,
      },
    )
    expect((await transport.waitForReady(5_000, 50)).type).toBe('health-ok')
    // The reference's healthz() resolves with a boolean.
    expect(await transport.healthz()).toBe(true)
    const path = join(agent.dir, 'out/reference.txt')
    await transport.writeFile(path, Buffer.from('from the host'))
    const read = await transport.readFile(path)
    expect(Buffer.isBuffer(read)).toBe(true)
    expect(read.toString('utf8')).toBe('from the host')
    const result = await transport.execute({ command: 'cat', args: [path], timeoutMs: 5_000 })
    expect(result).toMatchObject({ exitCode: 0, stdout: 'from the host', timedOut: false })
    expect(result).not.toHaveProperty('signal')
    const piped = await transport.execute({ command: 'cat', stdin: 'piped' })
    expect(piped.stdout).toBe('piped')
    const slow = await transport.execute({ command: 'sleep', args: ['5'], timeoutMs: 200 })
    expect(slow).toMatchObject({ timedOut: true, signal: 'SIGKILL' })
  })

  it('healthz() is false for an agent that cannot be reached, and health() says why', async () => {
    const transport = new VsockAgentTransport(
      { kind: 'unix', path: join(agent.dir, 'nobody.sock') },
      { secret: agent.secret, ...fast },
    )
    expect(await transport.healthz()).toBe(false)
    const error = await transport.health().catch((caught: unknown) => caught)
    expect(SandboxTransportError.isInstance(error)).toBe(true)
  })

  it('healthz() rejects when the agent refuses the secret: no amount of polling fixes that', async () => {
    const transport = new VsockAgentTransport(
      { kind: 'unix', path: agent.socketPath },
      { secret: 'a-secret-the-agent-never-gave-out', ...fast },
    )
    const error = await transport.healthz().catch((caught: unknown) => caught)
    expect(SandboxTransportError.isInstance(error)).toBe(true)
    expect((error as Error).message).toMatch(/refused this host's proof/)
  })

  it('waitForReady gives up after its timeout with a typed error', async () => {
    const transport = new VsockAgentTransport(
      { kind: 'unix', path: join(agent.dir, 'nobody.sock') },
      { secret: agent.secret, ...fast },
    )
    const error = await transport.waitForReady(400, 50).catch((caught: unknown) => caught)
    expect(SandboxCreateTimeoutError.isInstance(error)).toBe(true)
  })

  it("refuses to be built without the agent's secret, saying why", () => {
    const build = () => new VsockAgentTransport({ kind: 'unix', path: agent.socketPath })
    expect(build).toThrow(SandboxConfigValidationError)
    expect(build).toThrow(/authenticates every connection/)
  })

  it('gives up after a bounded number of attempts when the device closes without OK (no listener on the port)', async () => {
    const transport = new VsockAgentTransport(
      { kind: 'vsock', udsPath: vsockPath, port: 9999 },
      { secret: agent.secret, ...fast },
    )
    const started = Date.now()
    const error = await transport.health().catch((caught: unknown) => caught)
    expect(SandboxTransportError.isInstance(error)).toBe(true)
    expect((error as Error).message).toMatch(/after 3 attempts.*CONNECT 9999/)
    expect(Date.now() - started).toBeLessThan(2_000)
    expect(await transport.healthz()).toBe(false)
  })

  it('refuses a device that answers something other than OK', async () => {
    const path = join(agent.dir, 'liar.sock')
    const liar: Server = createServer((socket) => socket.end('NOPE\n'))
    await new Promise<void>((resolve) => liar.listen(path, resolve))
    try {
      const transport = new VsockAgentTransport(
        { kind: 'vsock', udsPath: path, port: 1024 },
        { secret: agent.secret, ...fast },
      )
      await expect(transport.health()).rejects.toThrow(/answered "NOPE"/)
      expect(await transport.healthz()).toBe(false)
    } finally {
      liar.close()
    }
  })

  it('opens a new connection per request, so it keeps working across a resume', async () => {
    const transport = new VsockAgentTransport(
      { kind: 'vsock', udsPath: vsockPath },
      { secret: agent.secret, ...fast, maxConnectAttempts: 10 },
    )
    expect((await transport.health()).resumes).toBe(0)
    agent.child.kill('SIGHUP')
    const until = Date.now() + 5_000
    let resumes = 0
    while (resumes === 0 && Date.now() < until) {
      resumes = (await transport.health().catch(() => ({ resumes: 0 }))).resumes
      if (resumes === 0) await new Promise((resolve) => setTimeout(resolve, 50))
    }
    expect(resumes).toBe(1)
  })
})

describe('VsockAgentTransport over an mTLS relay', () => {
  let agent: HostAgent
  let pki: Awaited<ReturnType<typeof makeTestPki>>
  let relay: { port: number; close(): Promise<void> }
  beforeAll(async () => {
    agent = await startHostAgent()
    pki = await makeTestPki()
    relay = await startMtlsRelay({
      host: '127.0.0.1',
      credentials: { cert: pki.serverCert, key: pki.serverKey, ca: pki.ca },
      agentSocketPath: agent.socketPath,
    })
  })
  afterAll(async () => {
    await relay?.close()
    await agent?.stop()
    await pki?.cleanup()
  })

  const endpoint = (): { kind: 'tls'; host: string; port: number; servername: string } => ({
    kind: 'tls',
    host: '127.0.0.1',
    port: relay.port,
    servername: 'localhost',
  })
  const client = (tls: Partial<TestPki> & { cert: string; key: string; ca?: string }) => ({
    cert: tls.cert,
    key: tls.key,
    ...(tls.ca ? { ca: tls.ca } : {}),
  })

  it('reaches the agent with a client certificate the relay trusts', async () => {
    const transport = new VsockAgentTransport(endpoint(), {
      secret: agent.secret,
      ...fast,
      tls: client({ cert: pki.clientCert, key: pki.clientKey, ca: pki.ca }),
    })
    expect(await transport.healthz()).toBe(true)
    expect((await transport.health()).type).toBe('health-ok')
  })

  it('is refused with a certificate from another CA, and refuses a relay it cannot verify', async () => {
    const stranger = new VsockAgentTransport(endpoint(), {
      secret: agent.secret,
      ...fast,
      tls: client({ cert: pki.strangerCert, key: pki.strangerKey, ca: pki.ca }),
    })
    expect(
      SandboxTransportError.isInstance(await stranger.health().catch((caught: unknown) => caught)),
    ).toBe(true)
    expect(await stranger.healthz()).toBe(false)
    const distrusting = new VsockAgentTransport(endpoint(), {
      secret: agent.secret,
      ...fast,
      tls: client({ cert: pki.clientCert, key: pki.clientKey, ca: pki.strangerCa }),
    })
    const error = await distrusting.health().catch((caught: unknown) => caught)
    expect(SandboxTransportError.isInstance(error)).toBe(true)
    expect((error as Error).message).toMatch(/TLS|certificate/i)
  })

  it('needs the backend mtls config for a TLS endpoint', async () => {
    const transport = new VsockAgentTransport(endpoint(), { secret: agent.secret, ...fast })
    await expect(transport.health()).rejects.toThrow(/mtls/)
  })
})

describe("VsockAgentTransport through a per-host relay (the reference's mtls handle)", () => {
  let agents: HostAgent[]
  let pki: Awaited<ReturnType<typeof makeTestPki>>
  let relay: { port: number; close(): Promise<void> }
  beforeAll(async () => {
    agents = [await startHostAgent(), await startHostAgent()]
    pki = await makeTestPki()
    relay = await startMtlsRelay({
      host: '127.0.0.1',
      credentials: { cert: pki.serverCert, key: pki.serverKey, ca: pki.ca },
      route: (sandboxId) => agents[Number(sandboxId.slice(-1))]?.socketPath,
    })
  })
  afterAll(async () => {
    await relay?.close()
    for (const agent of agents ?? []) await agent.stop()
    await pki?.cleanup()
  })

  it('names the guest in its first line, and reaches that guest only', async () => {
    for (const index of [0, 1]) {
      const transport = new VsockAgentTransport(
        {
          kind: 'mtls',
          host: '127.0.0.1',
          port: relay.port,
          sandboxId: `sbx-${index}`,
          tls: {
            ca: pki.ca,
            cert: Buffer.from(pki.clientCert),
            key: pki.clientKey,
            servername: 'localhost',
          },
        },
        { secret: agents[index]!.secret, ...fast },
      )
      const result = await transport.execute({
        command: 'pwd',
        cwd: join(agents[index]!.dir, 'out'),
      })
      expect(result.stdout.trim()).toBe(join(agents[index]!.dir, 'out'))
    }
    // A guest's secret does not open another guest's agent (healthz rejects: a refused secret).
    const crossed = new VsockAgentTransport(
      {
        kind: 'mtls',
        host: '127.0.0.1',
        port: relay.port,
        sandboxId: 'sbx-1',
        tls: { ca: pki.ca, cert: pki.clientCert, key: pki.clientKey, servername: 'localhost' },
      },
      { secret: agents[0]!.secret, ...fast },
    )
    expect(
      SandboxTransportError.isInstance(await crossed.healthz().catch((caught: unknown) => caught)),
    ).toBe(true)
  })
})
