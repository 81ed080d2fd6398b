import { AgentClient } from '@cordon/agent/sandbox'
import { vi } from 'vitest'
import { DirectSocket } from '../src/direct-socket.js'

/**
 * Watches readiness's two ways to the agent: when each socket was first
 * dialled, when the attach was tried (refused here, so the socket must
 * carry readiness), and each adoption of a socket's first connection.
 * Undone by `vi.restoreAllMocks()`.
 */
export function watchReadiness() {
  const original = DirectSocket.prototype.connect
  const firstDial = new Map<DirectSocket, number>()
  vi.spyOn(DirectSocket.prototype, 'connect').mockImplementation(function (
    this: DirectSocket,
    signal,
  ) {
    if (!firstDial.has(this)) firstDial.set(this, performance.now())
    return original.call(this, signal)
  })
  const viaAttach: number[] = []
  vi.spyOn(AgentClient.prototype, 'openSpareConnection').mockImplementation(async () => {
    viaAttach.push(performance.now())
    throw new Error('readiness went to the attach')
  })
  const adopted = vi.spyOn(AgentClient.prototype, 'adoptSpareConnection')
  return { firstDial, viaAttach, adopted }
}
