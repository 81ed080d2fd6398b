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
