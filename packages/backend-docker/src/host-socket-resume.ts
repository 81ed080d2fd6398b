import type { Duplex } from 'node:stream'
import { formatResumeLine, type MuxStream, type StreamOpening } from '@cordon/agent/protocol'
import { StdioChannel } from '@cordon/agent/sandbox'
import { timeLimit } from '@cordon/core/backend'
import type Docker from 'dockerode'
import { type SocketPipeSession, waitForResumed } from './agent-socket-pipe.js'
import { DirectSocket } from './direct-socket.js'

/** How often the host dials while the restored agent starts listening. */
const DIAL_POLL_MS = 2

/**
 * The way back to a restored gVisor agent that has a host-backed socket,
 * without the engine: the host puts the restore's marker beside the socket
 * (`RESTORED_MARKER`), the agent, which has watched for it since it was
 * suspended, listens there again, and the host dials it, writes the resume
 * line and speaks the session over that connection, as it would over the
 * engine exec's pipe (agent-socket-pipe.ts), which this spares a restore
 * (about 100 ms under gVisor, bench scenario 15). The connection's end ends
 * the session, and the agent with it.
 *
 * Undefined when the container has no host-backed socket, or the agent has
 * not listened by `listenWithinMs` (an agent of a version without the
 * watch, or a host socket gVisor does not create): the caller then takes
 * the pipe. The agent's secret is proved as on any connection first: the
 * resume line is the connection's first bytes, and only the host, root,
 * can reach the directory.
 */
export async function resumeOverHostSocket(options: {
  readonly docker: Docker
  readonly containerId: string
  readonly secret: string
  /** ms from now, `null` for none, undefined to keep the running one. */
  readonly lifetimeMs: number | null | undefined
  readonly signal: AbortSignal
  readonly listenWithinMs: number
  /** Streams the agent opens (egress connections). */
  readonly onStream?: (stream: MuxStream, opening: StreamOpening) => void
}): Promise<SocketPipeSession | undefined> {
  const socket = await DirectSocket.findOnHost(options.docker, options.containerId)
  if (!socket) return undefined
  let connection: Duplex | undefined
  try {
    try {
      socket.markRestored()
    } catch (error) {
      // Put there by an earlier try, which the agent has not taken yet: as good.
      if ((error as NodeJS.ErrnoException).code !== 'EEXIST') throw error
    }
    const deadline = timeLimit(options.listenWithinMs, options.signal)
    while (!connection && !deadline.aborted) {
      connection = await socket.connect(deadline).catch(() => undefined)
      if (!connection) await new Promise((resolve) => setTimeout(resolve, DIAL_POLL_MS))
    }
  } finally {
    socket.close()
  }
  if (!connection) return undefined
  const dialled = connection
  try {
    dialled.write(formatResumeLine(options.secret, options.lifetimeMs))
    await waitForResumed(dialled, options.signal, () => '')
  } catch (error) {
    dialled.destroy()
    throw error
  }
  const channel = new StdioChannel({
    fromAgent: dialled,
    toAgent: dialled,
    keepAlive: dialled as { ref?(): unknown; unref?(): unknown },
    ...(options.onStream ? { onStream: options.onStream } : {}),
    closeCarrier: () => dialled.destroy(),
  })
  return {
    channel,
    async closeAndWait() {
      // No process of the host's in the container to wait for: the connection is all there is.
      channel.close()
    },
  }
}
