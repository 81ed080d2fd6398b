import type { CordonBackendSandbox } from './sandbox.js'
import type { SandboxId } from './sandbox-id.js'

/**
 * The types of detached sandboxes (`create({ detached: true })`), which
 * outlive the host process that made them, as hosts see them in
 * `provider.list()` and as a backend hands one to `provider.connect(id)`.
 */

/** One sandbox in `provider.list()`. */
export interface SandboxListing {
  readonly id: SandboxId
  /** What the engine says of it: `running`, `paused`, or `ending` (stopped, being removed). */
  readonly status: 'running' | 'paused' | 'ending'
  /** The labels of what it runs in (cordon's own and the host's `labels`). */
  readonly labels: Readonly<Record<string, string>>
  /** When it was created, ms since the epoch. */
  readonly createdAt: number
  /** When its lifetime ends it on the engine's side, ms since the epoch; undefined for none. */
  readonly endsAt: number | undefined
  /** Made with `detached: true`: it outlives its creator and `connect(id)` can reach it. */
  readonly detached: boolean
}

/** What a backend's `connect()` is asked for. */
export interface SandboxBackendConnectRequest {
  readonly sandboxId: SandboxId
  /** The agent's secret the creator held, from the host's credential. */
  readonly secret: string
  /** Default timeout of each exec through this connection, in ms. */
  readonly execTimeoutMs: number
  readonly signal: AbortSignal | undefined
}

/** A detached sandbox a backend has connected to. */
export interface ConnectedBackendSandbox {
  readonly sandbox: CordonBackendSandbox
  /** When its lifetime ends it, ms since the epoch (the creator's `lifetimeMs` after its create). */
  readonly endsAt: number
}
