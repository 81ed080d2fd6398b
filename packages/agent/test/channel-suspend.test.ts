/**
 * What a memory snapshot asks of a stdio agent: `suspend-channel` ends the
 * session, and the agent serves nothing until a resume line brings a new
 * secret; from then on the old secret is refused. Run here as a child
 * process of the test, as the Docker backend runs it in a container.
 */
import { type ChildProcess, spawn } from 'node:child_process'
import { once } from 'node:events'
import { chmod, mkdtemp, rm } from 'node:fs/promises'
import { connect } from 'node:net'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import type { Readable, Writable } from 'node:stream'
import { afterEach, describe, expect, it } from 'vitest'
import { formatResumeLine, RESUMED_ACK, StreamMux } from '../src/protocol/index.js'
import { AgentClient } from '../src/sandbox/index.js'
import { AGENT_PROGRAM, LAUNCHER_PROGRAM } from './agent-harness.js'

interface Running {
  readonly child: ChildProcess
  readonly dir: string
  stderr(): string
}

const started: Running[] = []

async function startAgent(
  secret: string,
  directSocket?: string,
  hostSocket?: string,
): Promise<Running> {
  const dir = await mkdtemp(join(tmpdir(), 'cordon-suspend-'))
  await chmod(dir, 0o755)
  const child = spawn(process.execPath, [AGENT_PROGRAM], {
    env: {
      PATH: process.env.PATH ?? '/usr/bin:/bin',
      CORDON_AGENT_LISTEN: 'stdio',
      CORDON_AGENT_SECRET_STDIN: '1',
      CORDON_AGENT_WRITE_ROOTS: dir,
      ...(directSocket ? { CORDON_AGENT_DIRECT_SOCKET: directSocket } : {}),
      ...(hostSocket ? { CORDON_AGENT_HOST_SOCKET: hostSocket } : {}),
    },
    stdio: ['pipe', 'pipe', 'pipe'],
  })
  let stderr = ''
  child.stderr!.on('data', (chunk: Buffer) => {
    stderr += chunk.toString()
  })
  child.stdin!.write(`${secret}\n`)
  const running = { child, dir, stderr: () => stderr }
  started.push(running)
  return running
}

/** A host session over the agent's pipes, and a client proving `secret` on it. */
function session(agent: Running, secret: string): { mux: StreamMux; client: AgentClient } {
  const mux = new StreamMux(agent.child.stdout!, agent.child.stdin!, { initiator: true })
  const client = new AgentClient({
    secret,
    description: 'stdio',
    dial: async (_signal, kind) => mux.open({ kind }),
    maxConnectAttempts: 1,
  })
  return { mux, client }
}

async function echo(client: AgentClient, text: string): Promise<string> {
  let out = ''
  const running = await client.startExec(
    { command: 'echo', args: [text], env: {}, stdin: false },
    { onStdout: (bytes) => (out += Buffer.from(bytes).toString()), onStderr: () => {} },
  )
  await running.result
  return out
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

/** Whether a dial of the unix socket at `path` is refused (no listener, or no file). */
async function refuses(path: string): Promise<boolean> {
  const socket = connect(path)
  try {
    await once(socket, 'connect')
    return false
  } catch {
    return true
  } finally {
    socket.destroy()
  }
}

describe('suspend-channel and the resume line', () => {
  it("with waitForCloseMs, resolves only once the agent's host-backed listener is closed (gVisor cannot checkpoint it bound)", async () => {
    const secret = `secret-${Date.now()}-0123456789abcdef`
    const socketDir = await mkdtemp(join(tmpdir(), 'cordon-suspend-host-'))
    const hostSocket = join(socketDir, 'files.sock')
    try {
      const agent = await startAgent(secret, undefined, hostSocket)
      // The host's connections come over the host-backed socket, as the Docker backend's do under gVisor.
      const client = new AgentClient({
        secret,
        description: 'host-backed socket',
        // Dialled until the agent listens there.
        dial: async () => {
          for (let attempt = 0; ; attempt++) {
            const socket = connect(hostSocket)
            try {
              await once(socket, 'connect')
              return socket
            } catch (error) {
              socket.destroy()
              if (attempt > 500) throw error
              await new Promise((resolve) => setTimeout(resolve, 10))
            }
          }
        },
        maxConnectAttempts: 1,
      })
      expect(await echo(client, 'before')).toBe('before\n')
      expect(await refuses(hostSocket)).toBe(false)
      await client.suspendChannel(undefined, { waitForCloseMs: 5_000 })
      // At once, with no turn of the agent's in between.
      expect(await refuses(hostSocket)).toBe(true)
      expect(agent.child.exitCode).toBeNull()
    } finally {
      await rm(socketDir, { recursive: true, force: true })
    }
  })

  it('serves a new session under the new secret only, with the old secret refused', async () => {
    const oldSecret = `old-secret-${Date.now()}-0123456789abcdef`
    const newSecret = `new-secret-${Date.now()}-0123456789abcdef`
    const agent = await startAgent(oldSecret)
    const first = session(agent, oldSecret)
    expect(await echo(first.client, 'before')).toBe('before\n')
    await first.client.suspendChannel()
    // What the old session's host writes after the suspend (a heartbeat, a reset) is dropped.
    first.mux.release()
    agent.child.stdin!.write(Buffer.from([0, 0, 0, 9, 5, 0, 0, 0, 0]))
    agent.child.stdin!.write(formatResumeLine(newSecret, null))
    const stale = session(agent, oldSecret)
    const refused = await stale.client.health().catch((error: unknown) => error)
    expect(refused).toBeInstanceOf(Error)
    expect(String((refused as Error).message)).toMatch(/unauthori[sz]ed|refused|secret|proof/i)
    stale.mux.release()
    const fresh = session(agent, newSecret)
    expect(await echo(fresh.client, 'after')).toBe('after\n')
    expect(agent.child.exitCode).toBeNull()
  })

  it('ends when its stdin ends before a resume line: the host went away', async () => {
    const secret = `only-secret-${Date.now()}-0123456789abcdef`
    const agent = await startAgent(secret)
    const first = session(agent, secret)
    await first.client.suspendChannel()
    first.mux.release()
    const exited = once(agent.child, 'close')
    agent.child.stdin!.end()
    await exited
    expect(agent.stderr()).toMatch(/no resume line/)
  })

  /**
   * The three carriers a host resumes a gVisor-restored agent over: a plain
   * connection to its socket, and the two programs the engine's exec starts
   * to make one (cordon-launcher's `--pipe`, the agent's own `--pipe` where
   * the runtime has no launcher). Each then carries the whole session.
   */
  const carriers: Array<[string, (socketPath: string) => Promise<Carrier>]> = [
    ['a plain connection', connectionCarrier],
    [
      "cordon-launcher's --pipe",
      (socketPath) => pipeCarrier(LAUNCHER_PROGRAM, ['--pipe', socketPath]),
    ],
    [
      "the agent's --pipe",
      (socketPath) => pipeCarrier(process.execPath, [AGENT_PROGRAM, '--pipe', socketPath]),
    ],
  ]
  it.each(carriers)(
    'takes the resume line on the direct socket (the route a gVisor-restored agent uses) over %s, serves the session on it, and ends when it does',
    async (_name, open) => {
      const oldSecret = `old-secret-${Date.now()}-0123456789abcdef`
      const newSecret = `new-secret-${Date.now()}-0123456789abcdef`
      const socketDir = await mkdtemp(join(tmpdir(), 'cordon-suspend-socket-'))
      const socketPath = join(socketDir, 'agent.sock')
      try {
        const agent = await startAgent(oldSecret, socketPath)
        const first = session(agent, oldSecret)
        expect(await echo(first.client, 'before')).toBe('before\n')
        await first.client.suspendChannel()
        first.mux.release()
        const carrier = await open(socketPath)
        carrier.toAgent.write(formatResumeLine(newSecret, null))
        await readUntil(carrier.fromAgent, RESUMED_ACK)
        const mux = new StreamMux(carrier.fromAgent, carrier.toAgent, { initiator: true })
        const over = (secret: string) =>
          new AgentClient({
            secret,
            description: 'session over the socket',
            dial: async (_signal, kind) => mux.open({ kind }),
            maxConnectAttempts: 1,
          })
        expect(await echo(over(newSecret), 'after')).toBe('after\n')
        const refused = await over(oldSecret)
          .health()
          .catch((error: unknown) => error)
        expect(refused).toBeInstanceOf(Error)
        // Suspended again over this session, and resumed on stdin: the socket's session is over.
        await over(newSecret).suspendChannel()
        mux.release()
        const third = `third-secret-${Date.now()}-0123456789abcdef`
        agent.child.stdin!.write(formatResumeLine(third, null))
        const onStdin = session(agent, third)
        expect(await echo(onStdin.client, 'again')).toBe('again\n')
        await carrier.ended
        // Suspended once more, resumed over a new carrier, whose end ends the agent.
        const fourth = `fourth-secret-${Date.now()}-0123456789abcdef`
        await onStdin.client.suspendChannel()
        onStdin.mux.release()
        const last = await open(socketPath)
        last.toAgent.write(formatResumeLine(fourth, null))
        await readUntil(last.fromAgent, RESUMED_ACK)
        const exited = once(agent.child, 'close')
        last.close()
        await exited
        expect(agent.stderr()).toMatch(/the host closed the channel; stopping/)
      } finally {
        await rm(socketDir, { recursive: true, force: true })
      }
    },
  )
})

interface Carrier {
  readonly fromAgent: Readable
  readonly toAgent: Writable
  /** Resolves once the carrier has ended (the agent closed its end). */
  readonly ended: Promise<unknown>
  close(): void
}

async function connectionCarrier(socketPath: string): Promise<Carrier> {
  const socket = connect(socketPath)
  await once(socket, 'connect')
  return {
    fromAgent: socket,
    toAgent: socket,
    ended: once(socket, 'close'),
    close: () => socket.end(),
  }
}

async function pipeCarrier(program: string, args: string[]): Promise<Carrier> {
  const child = spawn(program, args, { stdio: ['pipe', 'pipe', 'inherit'] })
  return {
    fromAgent: child.stdout!,
    toAgent: child.stdin!,
    ended: once(child, 'close'),
    close: () => child.stdin!.end(),
  }
}

/** Reads `input` up to and including `line`, and leaves what follows unread. */
async function readUntil(input: Readable, line: string): Promise<void> {
  let seen = Buffer.alloc(0)
  for (;;) {
    const chunk = input.read() as Buffer | null
    if (chunk === null) {
      await once(input, 'readable')
      continue
    }
    seen = Buffer.concat([seen, chunk])
    const at = seen.indexOf(line)
    if (at === -1) continue
    const rest = seen.subarray(at + line.length)
    if (rest.length > 0) input.unshift(rest)
    return
  }
}
