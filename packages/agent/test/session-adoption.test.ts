/**
 * `adopt-session`: how a host that connects to a detached sandbox gets its
 * session (and with it the sandbox's egress connections) on a connection to
 * the agent's direct socket, once the creator's stdio session is over. The
 * agent runs as a child process of the test, as the Docker backend runs it
 * in a container; its egress port is a loopback port of this machine.
 */
import { type ChildProcess, spawn } from 'node:child_process'
import { once } from 'node:events'
import { chmod, mkdtemp, rm } from 'node:fs/promises'
import { connect, createServer, type Socket } from 'node:net'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import type { Duplex } from 'node:stream'
import { SandboxControlRefusedError } from '@cordon/core'
import { afterEach, describe, expect, it } from 'vitest'
import { type MuxStream, StreamMux, type StreamOpening } from '../src/protocol/index.js'
import { AgentClient } from '../src/sandbox/index.js'
import { AGENT_PROGRAM } from './agent-harness.js'

interface Running {
  readonly child: ChildProcess
  readonly dir: string
  readonly socketPath: string
  readonly egressPort: number
  stderr(): string
}

const started: Running[] = []

/** A free loopback port (the agent's proxy port listens there). */
async function freePort(): Promise<number> {
  const server = createServer()
  server.listen(0, '127.0.0.1')
  await once(server, 'listening')
  const { port } = server.address() as { port: number }
  server.close()
  await once(server, 'close')
  return port
}

async function startAgent(secret: string, detached: boolean): Promise<Running> {
  const dir = await mkdtemp(join(tmpdir(), 'cordon-adopt-'))
  await chmod(dir, 0o755)
  const socketPath = join(dir, 'agent.sock')
  const egressPort = await freePort()
  const child = spawn(process.execPath, [AGENT_PROGRAM], {
    env: {
      PATH: process.env.PATH ?? '/usr/bin:/bin',
      CORDON_AGENT_LISTEN: 'stdio',
      CORDON_AGENT_SECRET_STDIN: '1',
      CORDON_AGENT_WRITE_ROOTS: dir,
      CORDON_AGENT_DIRECT_SOCKET: socketPath,
      CORDON_AGENT_EGRESS_PORT: String(egressPort),
      ...(detached ? { CORDON_AGENT_DETACHED: '1', CORDON_AGENT_LIFETIME_MS: '600000' } : {}),
    },
    stdio: ['pipe', 'pipe', 'pipe'],
  })
  let stderr = ''
  child.stderr!.on('data', (chunk: Buffer) => {
    stderr += chunk.toString()
  })
  child.stdin!.write(`${secret}\n`)
  const running = { child, dir, socketPath, egressPort, stderr: () => stderr }
  started.push(running)
  return running
}

/** The creator's session over the agent's pipes. */
function stdioSession(agent: Running, secret: string): { mux: StreamMux; client: AgentClient } {
  const mux = new StreamMux(agent.child.stdout!, agent.child.stdin!, { initiator: true })
  const client = new AgentClient({
    secret,
    description: 'stdio',
    dial: async (_signal, kind) => mux.open({ kind }),
    maxConnectAttempts: 1,
  })
  return { mux, client }
}

async function connected(socketPath: string): Promise<Socket> {
  const socket = connect(socketPath)
  await once(socket, 'connect')
  return socket
}

/** Adopts the session on a new connection to the direct socket; the host's end of it. */
async function adopt(
  agent: Running,
  secret: string,
): Promise<{ mux: StreamMux; stream: Duplex; opened: Array<[MuxStream, StreamOpening]> }> {
  const client = new AgentClient({
    secret,
    description: 'direct socket',
    dial: async () => connected(agent.socketPath),
    maxConnectAttempts: 1,
  })
  const stream = await client.adoptSession(await connected(agent.socketPath))
  const opened: Array<[MuxStream, StreamOpening]> = []
  const mux = new StreamMux(stream, stream, {
    initiator: true,
    onStream: (muxStream, opening) => opened.push([muxStream, opening]),
  })
  return { mux, stream, opened }
}

async function refusal(agent: Running, secret: string): Promise<unknown> {
  return adopt(agent, secret).then(
    ({ stream }) => {
      stream.destroy()
      return undefined
    },
    (error: unknown) => error,
  )
}

/** What a client of the sandbox's proxy port gets: the bytes before the port closed the connection. */
async function throughProxyPort(agent: Running, send: string): Promise<string> {
  const socket = connect({ port: agent.egressPort, host: '127.0.0.1', allowHalfOpen: true })
  socket.on('error', () => {})
  let received = ''
  socket.on('data', (chunk: Buffer) => {
    received += chunk.toString()
  })
  // A refused connection is reset: its 'error' is the refusal, not a failure of the test.
  const closed = new Promise((resolve) => socket.once('close', resolve))
  socket.once('connect', () => socket.end(send))
  await closed
  return received
}

async function until(condition: () => boolean): Promise<void> {
  while (!condition()) await new Promise((resolve) => setTimeout(resolve, 20))
}

afterEach(async () => {
  for (const agent of started.splice(0)) {
    if (agent.child.exitCode === null && agent.child.signalCode === null) {
      agent.child.kill('SIGKILL')
      await once(agent.child, 'exit')
    }
    await rm(agent.dir, { recursive: true, force: true })
  }
})

describe('adopt-session', () => {
  it('is refused by an agent that is not detached: its session is the one on stdio', async () => {
    const secret = `secret-${Date.now()}-0123456789abcdef`
    const agent = await startAgent(secret, false)
    const creator = stdioSession(agent, secret)
    await creator.client.health()
    const refused = await refusal(agent, secret)
    expect(SandboxControlRefusedError.isInstance(refused)).toBe(true)
    expect((refused as Error).message).toMatch(/not detached/)
    // The creator's session goes on.
    expect((await creator.client.health()).resumes).toBe(0)
  })

  it("is refused while a detached agent's creator holds its stdio session, and by a client without the secret", async () => {
    const secret = `secret-${Date.now()}-0123456789abcdef`
    const agent = await startAgent(secret, true)
    const creator = stdioSession(agent, secret)
    await creator.client.health()
    const refused = await refusal(agent, secret)
    expect(SandboxControlRefusedError.isInstance(refused)).toBe(true)
    expect((refused as Error).message).toMatch(/creator still holds/)
    const stranger = await refusal(agent, `wrong-${secret}`)
    expect(stranger).toBeInstanceOf(Error)
    expect((stranger as Error).message).toMatch(/proof|secret/i)
    await creator.client.health()
  })

  it('serves the session, egress streams included, on the connection that adopted it, one at a time; its end refuses egress again and frees the session', async () => {
    const secret = `secret-${Date.now()}-0123456789abcdef`
    const agent = await startAgent(secret, true)
    const creator = stdioSession(agent, secret)
    await creator.client.health()
    // The creator goes away: the agent stays, and its proxy port refuses every connection.
    agent.child.stdin!.end()
    creator.mux.release()
    await until(() => /serving the direct socket/.test(agent.stderr()))
    expect(await throughProxyPort(agent, 'GET / HTTP/1.1\r\n\r\n')).toBe('')

    const host = await adopt(agent, secret)
    // A connection to the proxy port is now an egress stream to this host.
    const answered = throughProxyPort(agent, 'to the host')
    await until(() => host.opened.length === 1)
    const [egress, opening] = host.opened[0]!
    expect(opening.kind).toBe('egress')
    let seen = ''
    egress.on('data', (chunk: Buffer) => {
      seen += chunk.toString()
    })
    await once(egress, 'end')
    expect(seen).toBe('to the host')
    egress.end('from the host')
    expect(await answered).toBe('from the host')
    // Commands ride the session too, as on stdio.
    const overSession = new AgentClient({
      secret,
      description: 'adopted session',
      dial: async (_signal, kind) => host.mux.open({ kind }),
      maxConnectAttempts: 1,
    })
    expect((await overSession.health()).pid).toBe(agent.child.pid)

    // One host at a time: a second is refused while the first holds it.
    const second = await refusal(agent, secret)
    expect(SandboxControlRefusedError.isInstance(second)).toBe(true)
    expect((second as Error).message).toMatch(/another host holds/)

    // The host goes: the agent stays, egress is refused again, and the session is free.
    host.mux.close()
    host.stream.end()
    await until(() => (agent.stderr().match(/serving the direct socket/g) ?? []).length >= 2)
    expect(agent.child.exitCode).toBeNull()
    expect(await throughProxyPort(agent, 'nobody holds it')).toBe('')
    const next = await adopt(agent, secret)
    const again = throughProxyPort(agent, 'next host')
    await until(() => next.opened.length === 1)
    next.opened[0]![0].resume()
    next.opened[0]![0].end('answered again')
    expect(await again).toBe('answered again')
    next.stream.destroy()
  })
})
