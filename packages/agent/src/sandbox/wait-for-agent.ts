import { SandboxError, SandboxReadinessError, SandboxTransportError } from '@cordon/core'
import { sleep } from '@cordon/core/backend'
import type { HealthOkMessage } from '../protocol/index.js'
import type { AgentClient } from './agent-client.js'

/**
 * Polls the agent's health until it answers, and returns its answer, every
 * `pollIntervalMs` (default: 25 ms doubling up to 500 ms).
 * Connection failures are expected while the sandbox starts or resumes and
 * are retried until `signal` ends the wait (the create deadline); an agent
 * that answers but refuses the secret or speaks another protocol, or a peer
 * that cannot prove it holds the secret, will not get better, so that fails
 * at once with {@link SandboxReadinessError}.
 */
export function waitForAgent(
  client: AgentClient,
  sandboxId: string,
  signal: AbortSignal,
  pollIntervalMs?: number,
): Promise<HealthOkMessage> {
  return pollUntilAnswered(client, sandboxId, signal, pollIntervalMs, () => client.health(signal))
}

/**
 * As {@link waitForAgent}, but the proof is a connection the agent has
 * authenticated, which the client keeps as the spare for its first
 * operation (and keeps spares from then on): readiness costs one round trip
 * less than a health request, and the first command does not dial. For a
 * channel whose connections survive (see `keepSpareConnection`).
 */
export function waitForAgentConnection(
  client: AgentClient,
  sandboxId: string,
  signal: AbortSignal,
  pollIntervalMs?: number,
): Promise<void> {
  return pollUntilAnswered(client, sandboxId, signal, pollIntervalMs, () =>
    client.openSpareConnection(signal),
  )
}

async function pollUntilAnswered<T>(
  client: AgentClient,
  sandboxId: string,
  signal: AbortSignal,
  pollIntervalMs: number | undefined,
  check: () => Promise<T>,
): Promise<T> {
  // Without a fixed interval, start fast and back off: most agents answer within a few tries.
  let delay = pollIntervalMs ?? 25
  for (;;) {
    try {
      return await check()
    } catch (error) {
      if (signal.aborted) throw signal.reason ?? error
      if (!isRetryableReadinessFailure(error)) {
        throw new SandboxReadinessError(
          `the agent in sandbox ${sandboxId} at ${client.description} answered but cannot be used: ${(error as Error).message}`,
          sandboxId,
          { cause: error },
        )
      }
    }
    await sleep(delay, signal, 'create')
    if (pollIntervalMs === undefined) delay = Math.min(delay * 2, 500)
  }
}

/**
 * Whether a failed health check may succeed later: a transport failure that
 * is not the agent refusing the secret, speaking another protocol or failing
 * to prove the secret itself, or any
 * failure that is not a cordon error at all.
 */
export function isRetryableReadinessFailure(error: unknown): boolean {
  if (!SandboxTransportError.isInstance(error)) return !SandboxError.isInstance(error)
  const cause = (error as { cause?: unknown }).cause
  const name = (cause as { name?: string } | undefined)?.name
  return name !== 'AgentRemoteError' && name !== 'ProtocolError' && name !== 'AgentImpostorError'
}
