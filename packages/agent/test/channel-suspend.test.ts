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
import { afterEach, describe, expect, it } from 'vitest'
import { formatResumeLine, RESUMED_ACK, StreamMux } from '../src/protocol/index.js'
import { AgentClient } from '../src/sandbox/index.js'
import { AGENT_PROGRAM } from './agent-harness.js'

interface Running {
  readonly child: ChildProcess
  readonly dir: string
  stderr(): string
}

const started: Running[] = []

async function startAgent(secret: string, directSocket?: string): Promise<Running> {
  const dir = await mkdtemp(join(tmpdir(), 'cordon-suspend-'))
  await chmod(dir, 0o755)
  const child = spawn(process.execPath, [AGENT_PROGRAM], {
    env: {
      PATH: process.env.PATH ?? '/usr/bin:/bin',
      CORDON_AGENT_LISTEN: 'stdio',
      CORDON_AGENT_SECRET_STDIN: '1',
      CORDON_AGENT_WRITE_ROOTS: dir,
      ...(directSocket ? { CORDON_AGENT_DIRECT_SOCKET: directSocket } : {}),
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

describe('suspend-channel and the resume line', () => {
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

  it('takes the resume line on the direct socket too (the route a gVisor-restored agent uses), and ends when that connection does', async () => {
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
      const lifeline = connect(socketPath)
      await once(lifeline, 'connect')
      lifeline.write(formatResumeLine(newSecret, null))
      const [ack] = await once(lifeline, 'data')
      expect(String(ack)).toBe(RESUMED_ACK)
      const over = (secret: string) =>
        new AgentClient({
          secret,
          description: 'direct',
          dial: async () => {
            const socket = connect(socketPath)
            await once(socket, 'connect')
            return socket
          },
          maxConnectAttempts: 1,
        })
      expect(await echo(over(newSecret), 'after')).toBe('after\n')
      expect(
        await over(oldSecret)
          .health()
          .catch((error: unknown) => error),
      ).toBeInstanceOf(Error)
      const exited = once(agent.child, 'close')
      lifeline.destroy()
      await exited
      expect(agent.stderr()).toMatch(/closed the resume connection/)
    } finally {
      await rm(socketDir, { recursive: true, force: true })
    }
  })
})
