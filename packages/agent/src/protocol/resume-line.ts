/**
 * The line the host writes on a suspended stdio agent's stdin to start a
 * new session (`suspend-channel`): in the container it suspended, or in one
 * restored from that container's checkpoint. It carries the secret in force
 * from then on (the one before is refused) and the lifetime: a number of ms
 * counted from then, `null` for none, absent to keep the one running. The mark lets the agent drop whatever the old session's peer wrote
 * after the agent stopped reading.
 */
export const RESUME_LINE_MARK = 'cordon-resume:'

export function formatResumeLine(secret: string, lifetimeMs?: number | null): string {
  return `${RESUME_LINE_MARK}${JSON.stringify({ secret, ...(lifetimeMs !== undefined ? { lifetimeMs } : {}) })}\n`
}

/**
 * What the agent answers on a direct-socket connection that brought it a
 * resume line, once the new secret is in force: the host dials its other
 * connections only then (one made earlier would be read as a resume line).
 */
export const RESUMED_ACK = 'cordon-resumed\n'
