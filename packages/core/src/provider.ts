import type { SandboxConnectOptions, SandboxCreateConfig } from './config.js'
import type { SandboxListing } from './detached-sandbox.js'
import type { SandboxEnforcementDeclaration } from './enforcement.js'
import type {
  CordonSandbox,
  Sandbox,
  SandboxEnvironment,
  SandboxSnapshot,
  SandboxSnapshotListOptions,
} from './sandbox.js'
import type { SandboxVolumes } from './volumes.js'

/**
 * What makes sandboxes, with the reference's members: `id` names the kind of
 * provider (`cordon-<tier>-<runtime>`), `name` describes it
 * (`@cordon/sandbox: <tier>:<runtime>`). What `createSandboxProvider` returns
 * is a {@link CordonSandboxProvider}, which has more.
 */
export interface SandboxProvider {
  readonly id: string
  readonly name: string
  readonly environment: SandboxEnvironment
  /** Creates a sandbox that is ready to run a command. */
  create(config?: SandboxCreateConfig): Promise<Sandbox>
}

/**
 * A cordon provider. `await using provider = createSandboxProvider(...)`
 * closes it when the scope ends.
 */
export interface CordonSandboxProvider extends SandboxProvider, AsyncDisposable {
  /** `tier:runtime` of the backend. */
  readonly backend: string
  /** What the backend declares it enforces; `sandbox.enforced` says what holds for one sandbox. */
  readonly enforcement: SandboxEnforcementDeclaration
  /** Unique per provider instance; every resource it creates carries it as the owner. */
  readonly instanceId: string
  create(config?: SandboxCreateConfig): Promise<CordonSandbox>
  /**
   * The snapshots this provider's backend keeps (`sandbox.snapshot()`), on
   * its engine, whoever took them. A backend that takes none refuses both
   * with `SandboxControlRefusedError` naming `snapshot`.
   */
  readonly snapshots: SandboxSnapshots
  /**
   * Named persistent volumes on the backend's engine, which outlive every
   * sandbox and this provider (see {@link SandboxVolumes}); refused with
   * `SandboxControlRefusedError` naming `volumes` where the backend declares
   * `volumes: false`.
   */
  readonly volumes: SandboxVolumes
  /** Fills the warm pool (if configured) and resolves when it is full. */
  warm(options?: { readonly signal?: AbortSignal }): Promise<void>
  /**
   * Reaches a detached sandbox (`create({ detached: true })`) from any
   * process on the same engine, and resolves with a working sandbox once its
   * agent has accepted the credential: `options.credential`, else the one
   * this provider's `credentialStore` holds for `id`. Fails with
   * `SandboxCredentialRefusedError` (no credential, or a wrong one) or
   * `SandboxNotFoundError` (no such detached sandbox running); a backend
   * that declares no `reconnect` refuses with `SandboxControlRefusedError`
   * naming `connect`.
   */
  connect(id: string, options?: SandboxConnectOptions): Promise<CordonSandbox>
  /**
   * The sandboxes this provider may reach: on a backend that declares
   * `reconnect`, every detached sandbox of its engine (from any process)
   * and this provider's own, with status, labels, creation and end times;
   * elsewhere this provider's own live sandboxes.
   */
  list(options?: { readonly signal?: AbortSignal }): Promise<readonly SandboxListing[]>
  /**
   * Drains the warm pool, destroys every sandbox this provider still owns
   * (a detached one is only let go of: it runs on until its lifetime ends
   * it), releases the backend. It waits for creates still in flight: a
   * sandbox made after `close()` began is destroyed at once and its
   * `create()` rejects with `SandboxError` ("provider is closed").
   */
  close(): Promise<void>
}

/** `provider.snapshots`: what a host sees of the snapshots its backend keeps. */
export interface SandboxSnapshots {
  /** Every snapshot the backend keeps, oldest first. */
  list(options?: SandboxSnapshotListOptions): Promise<readonly SandboxSnapshot[]>
  /**
   * Removes a snapshot: no new sandbox can start from it, and its storage
   * goes once no sandbox started from it still runs. An unknown id is
   * `SandboxSnapshotNotFoundError`.
   */
  remove(id: string, options?: SandboxSnapshotListOptions): Promise<void>
}
