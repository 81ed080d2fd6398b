import type { MicroVMBackendConfig, TlsClientMaterial } from './config.js'
import { SandboxConfigValidationError } from './errors.js'

/**
 * How one microVM guest's agent is addressed, in the reference's shape:
 * - `unix`: a host unix socket the agent (or a relay to it) listens on;
 * - `vsock`: Firecracker's host-side vsock socket, then `CONNECT <port>`;
 * - `mtls`: a per-host relay reached over mutual TLS, told which guest by a
 *   first line `SANDBOX <sandboxId>`, after which it only moves bytes.
 */
export type SandboxAgentHandle =
  | { readonly kind: 'unix'; readonly path: string }
  | { readonly kind: 'vsock'; readonly udsPath: string; readonly port: number }
  | {
      readonly kind: 'mtls'
      readonly host: string
      readonly port: number
      readonly sandboxId: string
      readonly tls: TlsClientMaterial
    }

/** Options of `VsockAgentTransport`: the reference's fields, cordon's secret and tuning. */
export interface VsockTransportOptions {
  /**
   * The per-guest secret the agent challenges for. Required: cordon's agent
   * authenticates every connection (the reference's did not), so a transport
   * without one is refused with `SandboxConfigValidationError`.
   */
  readonly secret?: string
  /** Budget of one dial, including the vsock or TLS handshake (default 5 s). */
  readonly connectTimeoutMs?: number
  /** Keep dialling for this long (a resuming guest); without it, `maxConnectAttempts` bounds the dials. */
  readonly connectRetryBudgetMs?: number
  /** Fixed pause between dials (default: 50 ms doubling up to 1 s). */
  readonly connectRetryIntervalMs?: number
  /**
   * Bound on a quiet connection, in ms. cordon's agent and client exchange
   * heartbeats, so a silent command is never mistaken for a dead connection;
   * this sets the heartbeat to a quarter of it (four missed heartbeats end the
   * connection).
   */
  readonly readIdleTimeoutMs?: number
  /** Dials per operation when no retry budget is given (default 5). */
  readonly maxConnectAttempts?: number
  /** Client certificate for a control-plane `tls` endpoint. */
  readonly tls?: TlsClientMaterial
  /** Guest port for a `vsock` handle that names none (default 1024). */
  readonly vsockPort?: number
}

/** One command for `VsockAgentTransport.execute`. */
export interface VsockExecuteRequest {
  readonly command: string
  readonly args?: readonly string[]
  readonly cwd?: string
  readonly env?: Readonly<Record<string, string>>
  readonly timeoutMs?: number
  readonly stdin?: string | Uint8Array
  readonly signal?: AbortSignal
}

/** The reference's name for the closure that mints the control plane's bearer token. */
export type OrchestratorTokenProvider = () => Promise<string>

/**
 * The reference's name for the microVM backend's settings once the tier is
 * chosen: `MicroVMBackendConfig` without `tier` and `service`, plus the
 * agent transport's tuning (`transport`), as the reference had it.
 */
export type FirecrackerBackendInternalConfig = Omit<MicroVMBackendConfig, 'tier' | 'service'> & {
  readonly transport?: VsockTransportOptions
}

/**
 * What an agent answers to a health request (`VsockAgentTransport.health`):
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
