import type { FramedConnection } from '../protocol/index.js'
import type { AgentClient } from './agent-client.js'

/** What keeps a host's hold on its sandbox's agent (see {@link keepHostHold}). */
export interface HostHoldKeeper {
  /** Lets go: the connection closes, and the agent ends after its grace unless the sandbox is deleted first. */
  stop(): void
}

/**
 * Holds a sandbox that is not detached to this host process for as long as
 * the process lives (`hold-host`, host-hold.ts in the agent): one
 * connection, heartbeats only, dialled again whenever it drops (a reset, a
 * silence while the host was starved) so a host that is still alive comes
 * back well within the agent's `graceMs`. The connection and the redial's
 * timer do not keep the host's event loop alive: a host that exits, or is
 * killed, lets go by going, and the agent ends its sandbox `graceMs` later.
 *
 * Resolves once the agent holds the first connection; rejects (a
 * `SandboxError`: the agent refused, or is too old to be asked) if it did
 * not, so a create fails rather than leave a guest its host cannot end.
 */
export async function keepHostHold(client: AgentClient, graceMs: number): Promise<HostHoldKeeper> {
  let stopped = false
  let current: FramedConnection | undefined
  const take = (connection: FramedConnection): void => {
    current = connection
    const socket = connection.socket as { unref?(): unknown }
    socket.unref?.()
    if (stopped) connection.destroy()
  }
  take(await client.holdHost(graceMs))
  // Several tries inside the grace: the first redial may meet an agent busy with a resume.
  const redialMs = Math.max(50, Math.min(1_000, Math.floor(graceMs / 10)))
  void (async () => {
    // Time without a hold while the agent was not frozen: past the grace,
    // the agent has ended by itself (its guest with it), and there is
    // nothing left to hold.
    let unheldMs = 0
    while (!stopped && unheldMs <= graceMs) {
      const connection = current
      if (connection) {
        try {
          // Heartbeats only (consumed by the connection): this returns when it closes.
          while ((await connection.read()) !== undefined) {}
        } catch {
          // Reset or silent: dialled again below.
        }
        connection.destroy()
        current = undefined
        unheldMs = 0
      }
      if (stopped) return
      const started = performance.now()
      await new Promise<void>((resolve) => setTimeout(resolve, redialMs).unref())
      if (stopped) return
      // A frozen agent answers nothing, and its grace does not run meanwhile (its clocks are held).
      if (client.isIdleHeld) continue
      try {
        take(await client.holdHost(graceMs))
      } catch {
        // Not there now (resuming, gone): tried again after the pause above.
        unheldMs += performance.now() - started
      }
    }
  })()
  return {
    stop() {
      stopped = true
      current?.destroy()
      current = undefined
    },
  }
}
