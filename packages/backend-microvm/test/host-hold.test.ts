import { once } from 'node:events'
import { afterEach, describe, expect, it } from 'vitest'
import { VsockAgentTransport } from '../src/index.js'
import { type HostAgent, startHostAgent } from './host-agent.js'

/**
 * The agent's side of `hold-host` (host-hold.ts in @cordon/agent), on the
 * real bundled agent: a host whose hold drops and comes back within the
 * grace keeps its agent; once nothing holds it for the grace, the agent
 * exits (which, in a guest, ends the guest: openapi.yaml, **Agent exit**).
 */

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms))
const GRACE_MS = 1_500
/** Past the grace: the agent's close and exit on a loaded machine. */
const EXIT_MARGIN_MS = 10_000
const fast = { maxConnectAttempts: 3, retryDelayMs: 20, connectTimeoutMs: 2_000 }

describe('hold-host on the real agent', () => {
  let agent: HostAgent | undefined
  afterEach(async () => {
    await agent?.stop()
    agent = undefined
  })

  it('a hold that drops and comes back within the grace keeps the agent; none for the grace ends it', async () => {
    agent = await startHostAgent()
    const { child } = agent
    const transport = new VsockAgentTransport(
      { kind: 'unix', path: agent.socketPath },
      { secret: agent.secret, ...fast },
    )
    const exited = once(child, 'exit')
    const first = await transport.client.holdHost(GRACE_MS)
    first.destroy()
    // The host comes back at once (a reset connection, redialled).
    const second = await transport.client.holdHost(GRACE_MS)
    await sleep(GRACE_MS * 2)
    expect(child.exitCode).toBeNull()
    expect((await transport.client.health()).type).toBe('health-ok')

    second.destroy()
    const ended = await Promise.race([
      exited.then(() => true),
      sleep(GRACE_MS + EXIT_MARGIN_MS).then(() => false),
    ])
    expect(ended, agent.stderr()).toBe(true)
    expect(child.exitCode).toBe(0)
    expect(agent.stderr()).toContain('no host has held on for the grace; stopping')
  })

  it('an agent no host ever held is not ended by the hold', async () => {
    agent = await startHostAgent()
    const transport = new VsockAgentTransport(
      { kind: 'unix', path: agent.socketPath },
      { secret: agent.secret, ...fast },
    )
    // Operations alone (a detached sandbox's hosts never hold) arm nothing.
    expect((await transport.client.health()).type).toBe('health-ok')
    await sleep(GRACE_MS * 2)
    expect(agent.child.exitCode).toBeNull()
  })
})
