/**
 * The kit's dialers: a backend reaches an agent on a unix socket or over TCP
 * with `dialUnix` / `dialTcp` and an `AgentClient`, nothing else.
 */
import { join } from 'node:path'
import { afterEach, describe, expect, it } from 'vitest'
import { AgentClient, dialTcp, dialUnix, RetryableDialError } from '../src/sandbox/index.js'
import { type AgentUnderTest, startAgentProcess, tcpPortOf } from './agent-harness.js'

describe('agent dialers', () => {
  let agent: AgentUnderTest | undefined
  afterEach(async () => {
    await agent?.stop()
    agent = undefined
  })

  it('dialUnix reaches an agent listening on a unix socket', async () => {
    agent = await startAgentProcess()
    const client = new AgentClient({
      secret: agent.secret,
      dial: dialUnix(agent.socketPath),
      description: `unix:${agent.socketPath}`,
    })
    const health = await client.health(AbortSignal.timeout(5_000))
    expect(health).toMatchObject({ type: 'health-ok', writeRoots: [agent.outputs] })
  })

  it('dialTcp reaches an agent listening on TCP', async () => {
    agent = await startAgentProcess({ listen: 'tcp:127.0.0.1:0' })
    const client = new AgentClient({
      secret: agent.secret,
      dial: dialTcp('127.0.0.1', tcpPortOf(agent)),
      description: 'tcp',
    })
    expect(await client.health(AbortSignal.timeout(5_000))).toMatchObject({ type: 'health-ok' })
  })

  it('a missing socket is a retryable dial failure, and an aborted dial rejects', async () => {
    agent = await startAgentProcess()
    const dial = dialUnix(join(agent.dir, 'no-such.sock'))
    await expect(dial(AbortSignal.timeout(5_000), 'agent')).rejects.toBeInstanceOf(
      RetryableDialError,
    )
    await expect(dialUnix(agent.socketPath)(AbortSignal.abort(), 'agent')).rejects.toBeInstanceOf(
      RetryableDialError,
    )
  })
})
