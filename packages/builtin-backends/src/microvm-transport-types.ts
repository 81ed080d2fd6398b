import type { TlsClientMaterial } from '@cordon/core'
import type { MicroVMBackendConfig } from './microvm-config.js'

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
