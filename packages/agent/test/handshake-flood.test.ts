import { connect, type Socket } from 'node:net'
import { afterEach, describe, expect, it } from 'vitest'
import { type AgentUnderTest, startAgentProcess } from './agent-harness.js'

/**
 * Anything that reaches the agent's socket can open connections without the
 * secret. A flood of idle ones must not keep the host's own connection out.
 */
describe('a flood of unauthenticated connections', () => {
  let agent: AgentUnderTest | undefined
  const flood: Socket[] = []
  afterEach(async () => {
    for (const socket of flood.splice(0)) socket.destroy()
    await agent?.stop()
  })

  it("does not keep the host's fresh connection out", async () => {
    agent = await startAgentProcess()
    const socketPath = agent.socketPath
    // Far more than the listener's connection limit, all left idle after connecting.
    await Promise.all(
      Array.from(
        { length: 2_000 },
        () =>
          new Promise<void>((resolve) => {
            const socket = connect(socketPath)
            socket.on('error', () => {})
            socket.once('connect', () => resolve())
            socket.once('close', () => resolve())
            flood.push(socket)
          }),
      ),
    )
    const connection = await agent.connect()
    await connection.send({ type: 'health' })
    const reply = await connection.read()
    expect(reply).toMatchObject({ kind: 'message', message: { type: 'health-ok' } })
    connection.close()
  }, 60_000)
})
