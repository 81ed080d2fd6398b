/**
 * The line the host writes to a suspended stdio agent (`suspend-channel`)
 * to start a new session: on its stdin, or as the first bytes of a
 * connection to its direct socket, which then carries the session. In the
 * container it suspended, or in one restored from that container's
 * checkpoint. It carries the secret in force from then on (the one before
 * is refused) and the lifetime: a number of ms counted from then, `null`
 * for none, absent to keep the one running. The mark lets the agent drop
 * whatever the old session's peer wrote after the agent stopped reading.
 */
export const RESUME_LINE_MARK = 'cordon-resume:'

export function formatResumeLine(secret: string, lifetimeMs?: number | null): string {
  return `${RESUME_LINE_MARK}${JSON.stringify({ secret, ...(lifetimeMs !== undefined ? { lifetimeMs } : {}) })}\n`
}

/**
 * What the agent answers on a direct-socket connection that brought it a
 * resume line, once the new secret is in force: the session's frames follow
 * it on that connection, and the host opens streams only once it has read it.
 */
export const RESUMED_ACK = 'cordon-resumed\n'

/**
 * The file whose appearance beside the agent's host-backed socket
 * (`CORDON_AGENT_HOST_SOCKET`'s directory) tells a suspended agent that it
 * runs again in a container restored from its checkpoint, so that it listens
 * there again and takes its resume line on that socket. gVisor cannot save a
 * listening host socket, so the agent cannot listen before it knows; and the
 * other way in, a pipe the engine's exec starts inside the container, costs
 * a restore about 100 ms more. Only the host writes it: the directory is
 * root's, mode 0700, on the host and inside. It holds nothing.
 */
export const RESTORED_MARKER = 'restored'
