import { once } from 'node:events'
import { createServer, type Socket } from 'node:net'
import { SandboxControlRefusedError } from '@cordon/core'
import { afterEach, describe, expect, it } from 'vitest'
import { DeadlineClock } from '../src/deadline-clock.js'
import {
  computeAgentProof,
  type ExitMessage,
  FramedConnection,
  PROTOCOL_VERSION,
  parseClientMessage,
  requestClocks,
  requestExec,
  requestHealth,
  verifyAuthProof,
} from '../src/protocol/index.js'
import { type AgentUnderTest, delay, startAgentProcess } from './agent-harness.js'
import { tcpAgentSandbox } from './tcp-agent-sandbox.js'

/**
 * What keeps an agent whole across a pause of its sandbox: its deadlines
 * held while the host has it frozen, and connections that survive a freeze
 * longer than their idle budget. The freeze here is SIGSTOP of the agent
 * (what the cgroup freezer does to every process of a sandbox); the Docker
 * backend's tests freeze real sandboxes under runc and gVisor.
 */
describe('DeadlineClock', () => {
  it('passes no deadline while held, and moves each later by the time held', async () => {
    const clock = new DeadlineClock()
    const fired: number[] = []
    const started = performance.now()
    clock.after(100, () => fired.push(performance.now() - started))
    const cancelled = clock.after(120, () => fired.push(-1))
    clock.hold()
    await delay(250)
    expect(fired).toEqual([])
    expect(Math.round(clock.release())).toBeGreaterThanOrEqual(245)
    cancelled.cancel()
    await delay(200)
    expect(fired).toHaveLength(1)
    // 100 ms of running time: the 250 held did not count.
    expect(fired[0]).toBeGreaterThanOrEqual(340)
    // Releasing a clock that is not held does nothing.
    expect(clock.release()).toBe(0)
  })
})

describe('an agent across a pause', () => {
  let agent: AgentUnderTest | undefined
  afterEach(async () => {
    if (agent?.child.signalCode === null) agent.child.kill('SIGCONT')
    await agent?.stop()
    agent = undefined
  })

  it('does not time a command out for the time its clocks were held', async () => {
    agent = await startAgentProcess()
    const connection = await agent.connect()
    let stdout = ''
    const session = await requestExec(
      connection,
      {
        command: 'sh',
        args: ['-c', 'sleep 3; echo done'],
        env: {},
        stdin: false,
        timeoutMs: 2_000,
      },
      { onStdout: (bytes) => (stdout += Buffer.from(bytes).toString()), onStderr: () => {} },
    )
    // About 3 s of wall time, 2.5 s of it held: the command runs past its
    // 2 s timeout only in wall time (the rest is room for a loaded machine).
    await delay(100)
    expect(await requestClocks(await agent.connect(), 'pause-clocks')).toBe(0)
    await delay(2_500)
    expect(await requestClocks(await agent.connect(), 'resume-clocks')).toBeGreaterThanOrEqual(
      2_400,
    )
    const exit: ExitMessage = await session.result
    expect(exit.timedOut).toBe(false)
    expect(exit.exitCode).toBe(0)
    expect(stdout).toBe('done\n')
  })

  it('keeps a connection through a freeze four times its idle budget', async () => {
    agent = await startAgentProcess()
    // Heartbeats every 100 ms: silence past 400 ms would end the connection.
    const connection = await agent.connect({ heartbeatMs: 100 })
    connection.holdIdle(true)
    agent.child.kill('SIGSTOP')
    await delay(1_600)
    agent.child.kill('SIGCONT')
    connection.holdIdle(false)
    await delay(300)
    expect(connection.isClosed).toBe(false)
    expect((await requestHealth(connection)).type).toBe('health-ok')
  })

  it('ends at its lifetime in running time: held time does not count', async () => {
    agent = await startAgentProcess({ env: { CORDON_AGENT_LIFETIME_MS: '1000' } })
    const child = agent.child
    const exited = new Promise<number>((resolve) =>
      child.once('exit', () => resolve(performance.now())),
    )
    const started = performance.now()
    await requestClocks(await agent.connect(), 'pause-clocks')
    await delay(1_500)
    expect(child.exitCode).toBeNull()
    await requestClocks(await agent.connect(), 'resume-clocks')
    const end = await exited
    expect(agent.stderr()).toContain('lifetime reached')
    // 1.5 s held: it ran well past its 1 s in wall time (the agent's lifetime
    // began at its start, before `started`, hence not the whole 2.5 s).
    expect(end - started).toBeGreaterThanOrEqual(2_000)
  })
})

describe('pause on an agent of an earlier revision', () => {
  it('is refused with SandboxControlRefusedError before anything is frozen, and the sandbox runs on', async () => {
    const secret = 'revision-one-secret-0123456789ab'
    const requests: unknown[] = []
    // Revision 1: the file API and kept processes, but no held deadlines.
    const server = createServer(async (socket: Socket) => {
      const connection = new FramedConnection(socket)
      const nonce = 'ab'.repeat(32)
      try {
        await connection.send({
          type: 'hello',
          protocol: PROTOCOL_VERSION,
          nonce,
          agentVersion: 'old',
          revision: 1,
        })
        const frame = await connection.read()
        if (frame?.kind !== 'message') return
        const auth = parseClientMessage(frame.message)
        if (auth.type !== 'auth' || !verifyAuthProof(secret, nonce, auth.proof)) return
        await connection.send({
          type: 'auth-ok',
          proof: computeAgentProof(secret, auth.nonce, nonce),
        })
        const request = await connection.read()
        if (request?.kind === 'message') requests.push(request.message)
      } catch {
        // The client hung up.
      }
    })
    server.listen(0, '127.0.0.1')
    await once(server, 'listening')
    const port = (server.address() as { port: number }).port
    const frozen: string[] = []
    try {
      const sandbox = tcpAgentSandbox({
        port,
        secret,
        tuning: { maxConnectAttempts: 2, retryDelayMs: 20 },
        init: {
          freezer: {
            pause: async () => {
              frozen.push('pause')
            },
            resume: async () => {
              frozen.push('resume')
            },
          },
        },
      })
      const error = await sandbox.pause!().catch((caught: unknown) => caught)
      expect(SandboxControlRefusedError.isInstance(error)).toBe(true)
      expect((error as Error).message).toContain('needs 2')
      expect(frozen).toEqual([])
      expect(requests).toEqual([])
      expect(sandbox.status).toBe('ready')
    } finally {
      server.close()
    }
  })
})
