/**
 * The agent's exit status, for a host that learns it from its runtime (the
 * Docker engine's `die` event, a guest's exit) rather than over the channel,
 * which is already gone by then.
 */
export const AGENT_EXIT_CODES = {
  /** The host closed the channel, a stop signal, or the lifetime ran out. */
  stopped: 0,
  /** A resume failed. */
  resumeFailed: 1,
  /** The configuration was invalid, or the agent could not start. */
  cannotStart: 2,
  /** A capped writable directory grew past its cap; the sandbox's processes were killed. */
  storageLimit: 3,
} as const
