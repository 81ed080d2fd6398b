import { SandboxConfigValidationError } from './errors.js'

/**
 * What an agent answers to a health request (a transport's `health()`):
 * the agent protocol's `health-ok` message, defined here because
 * `@cordon/agent` builds on core and not the other way round.
 */
export interface AgentHealthReport {
  readonly type: 'health-ok'
  readonly pid: number
  readonly uptimeMs: number
  /** How many resume signals the agent has handled. */
  readonly resumes: number
  readonly agentVersion: string
  readonly writeRoots: readonly string[]
  readonly readRoots: readonly string[]
  /**
   * The agent runs as root and every command and file operation under
   * another uid (`CORDON_AGENT_RUN_AS`), so sandbox code can neither trace,
   * signal nor impersonate it. Absent (an older agent): not known, taken as
   * false.
   */
  readonly commandsUnderOtherUid?: boolean
  /**
   * The lifetime the agent ends itself at, in ms of running time from its
   * start, when it was given one: a backend whose lifetime reaches the agent
   * indirectly (ACI's config map) checks here that it arrived.
   */
  readonly lifetimeMs?: number
}

/**
 * The shortest per-sandbox secret: the agent refuses to start with less, and
 * a transport refuses to be made with less ({@link requireAgentSecret}).
 * Anything shorter is guessable. `@cordon/agent` uses this one.
 */
export const MIN_AGENT_SECRET_LENGTH = 16

/**
 * Refuses agent transport options without the per-guest secret: cordon's
 * agent authenticates every connection, so there is no unauthenticated mode
 * to fall back to.
 */
export function requireAgentSecret(secret: unknown, subject: string): string {
  if (typeof secret === 'string' && secret.length >= MIN_AGENT_SECRET_LENGTH) return secret
  throw new SandboxConfigValidationError(subject, [
    {
      path: 'secret',
      message: `cordon's agent authenticates every connection: give the per-guest secret (${MIN_AGENT_SECRET_LENGTH} characters or more) the orchestrator delivered to the guest`,
    },
  ])
}
