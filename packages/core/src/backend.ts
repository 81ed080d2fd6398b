import type { SandboxBackendConfigBase, SandboxBackendDefinition } from './backend-definition.js'
import type { BrokeredCredential } from './config.js'
import {
  SANDBOX_DEFAULT_MAX_PROCESSES,
  SANDBOX_DEFAULT_MEMORY_LIMIT_MB,
  SANDBOX_DEFAULT_TIMEOUT_MS,
} from './constants.js'
import { requestRefusal } from './control-refusal.js'
import type {
  ConnectedBackendSandbox,
  SandboxBackendConnectRequest,
  SandboxListing,
} from './detached-sandbox.js'
import { DENY_ALL, type EgressPolicy } from './egress-policy.js'
import type { SandboxEvent } from './events.js'
import type { ResolvedContainerSandboxLayout } from './layout.js'
import type { CordonBackendSandbox, Sandbox, SandboxSnapshotStore } from './sandbox.js'
import { newSandboxId, type SandboxId } from './sandbox-id.js'
import type { SandboxBackendVolumes } from './volumes.js'

/**
 * What a backend's `create()` takes, with the reference's fields. cordon's
 * provider passes a limit only where the host named one (the call's, else
 * the provider's default); the backend applies its own defaults, and only
 * for what it enforces.
 */
export interface SandboxBackendOptions {
  /** Aborts the creation; everything made so far is removed. */
  readonly signal?: AbortSignal
  /**
   * Default working directory of the sandbox's commands: absolute, or
   * relative to the sandbox's `rootDir`. A cordon backend makes it at
   * `create()` if it is missing (as the sandbox's user, inside a writable
   * directory) or refuses the create with `SandboxConfigValidationError`
   * naming `workingDirectory`. cordon's provider passes the call's value,
   * else the layout's outputs path, else `.` (the sandbox's `rootDir`).
   */
  readonly workingDirectory: string
  readonly egress?: EgressPolicy
  /** Default timeout of each exec, in ms. */
  readonly timeoutMs?: number
  readonly memoryLimitMb?: number
  readonly maxProcesses?: number
  readonly env?: Readonly<Record<string, string>>
  /** The id the sandbox gets (default: a new one). */
  readonly sandboxId?: SandboxId
  /**
   * How long the sandbox may live, in ms, enforced on the engine's side too
   * where the backend can (so it ends even if its host dies first).
   */
  readonly lifetimeMs?: number
  /**
   * The snapshot the sandbox starts from (`snp_…`), where the backend
   * declares `snapshot`; its files (and processes) are in place before
   * `create()` resolves.
   */
  readonly snapshot?: string
  /**
   * Told the name of each step of the create as it begins (cordon's
   * provider times them for the `create.ready` event); a backend passes it
   * to `runCreateSequence`.
   */
  readonly onStep?: (name: string) => void
  /**
   * The sandbox outlives the host process (see `SandboxCreateConfig.detached`);
   * the provider passes it only with a lifetime, and only to a backend that
   * declares `reconnect`. The backend's sandbox then has a `reconnectSecret`.
   */
  readonly detached?: boolean
}

/**
 * A backend, in the reference's shape: `tier`, `name` and `create`. Every
 * cordon backend package's `createBackend()` returns one (with `close()`,
 * which releases what the backend shares between sandboxes).
 */
export interface SandboxBackend<Tier extends string = string> {
  /**
   * The kind of boundary: `container`, `microvm` (the reference's
   * `SandboxTier`), or a backend's own (`process`). Generic, defaulting to
   * `string`, so that a built-in backend's factory (`createBackend` of
   * `@cordon/backend-docker`) can say its literal tier and a host of the
   * reference's `const tier: SandboxTier = backend.tier` compiles, while a
   * plug-in backend with a tier of its own needs no change.
   */
  readonly tier: Tier
  /** `tier:runtime`; used in errors and events. */
  readonly name: string
  /**
   * Creates a sandbox and resolves only when it can run a command. On failure
   * or abort it removes everything it made before rejecting.
   */
  create(options: SandboxBackendOptions): Promise<Sandbox>
  /** Releases shared resources (connections, gateways). Sandboxes are destroyed by their owner. */
  close?(): Promise<void>
}

/** What cordon's own backends are: a {@link SandboxBackend} whose sandboxes have every member. */
export interface CordonSandboxBackend<Tier extends string = string> extends SandboxBackend<Tier> {
  create(options: SandboxBackendOptions): Promise<CordonBackendSandbox>
  /**
   * Reaches a detached sandbox this backend made, from any process: resolves
   * once its agent has accepted `secret`. Fails with `SandboxNotFoundError`
   * when there is no such detached sandbox running, and with
   * `SandboxCredentialRefusedError` when its agent refuses the secret.
   * Required where the definition declares `reconnect`.
   */
  connect?(request: SandboxBackendConnectRequest): Promise<ConnectedBackendSandbox>
  /** The sandboxes this backend may reach (what `provider.list()` shows). */
  list?(options: { readonly signal?: AbortSignal }): Promise<readonly SandboxListing[]>
  close(): Promise<void>
  /** The snapshots the backend keeps; present where its definition declares `snapshot`. */
  readonly snapshots?: SandboxSnapshotStore
  /**
   * Named persistent volumes, on a backend whose definition declares
   * `volumes: true` (the provider refuses them before asking otherwise).
   * The provider has validated names and sizes.
   */
  readonly volumes?: SandboxBackendVolumes
}

/**
 * {@link SandboxBackendOptions} with every default applied, as a backend
 * works with them. A limit the backend does not enforce stays undefined.
 */
export interface SandboxCreateRequest<Limit extends number | undefined = number> {
  readonly id: SandboxId
  readonly env: Readonly<Record<string, string>>
  readonly memoryLimitMb: Limit
  readonly maxProcesses: Limit
  /** Default timeout of each exec, in ms. */
  readonly execTimeoutMs: number
  /** Lifetime in ms, or undefined for none. */
  readonly lifetimeMs: number | undefined
  readonly workingDirectory: string
  readonly egress: EgressPolicy
  readonly signal: AbortSignal | undefined
  /** The snapshot to start from, if any. */
  readonly snapshot: string | undefined
  readonly onStep: ((name: string) => void) | undefined
  /** Outlives the host process; set only with a lifetime (see SandboxBackendOptions.detached). */
  readonly detached: boolean
}

/**
 * Refuses what `definition` declares it cannot enforce (the provider has
 * already; a host may call a backend directly), then applies the defaults
 * to what a backend's `create()` was given: the reference's memory and
 * process limits where the backend enforces them, none where it does not.
 */
export function resolveBackendOptions<Config extends SandboxBackendConfigBase>(
  options: SandboxBackendOptions,
  definition: SandboxBackendDefinition<Config>,
  config: Config,
): SandboxCreateRequest<number | undefined> {
  // The default policy is checked like a named one: a backend that cannot
  // enforce deny-all, called directly with no egress, must refuse rather
  // than report deny-all over an open network.
  const egress = options.egress ?? DENY_ALL
  const refusal = requestRefusal(definition, config, { ...options, egress })
  if (refusal) throw refusal
  const { enforcement } = definition
  return {
    id: options.sandboxId ?? newSandboxId(),
    env: options.env ?? {},
    memoryLimitMb: enforcement.memoryLimit
      ? (options.memoryLimitMb ?? SANDBOX_DEFAULT_MEMORY_LIMIT_MB)
      : undefined,
    maxProcesses: enforcement.processLimit
      ? (options.maxProcesses ?? SANDBOX_DEFAULT_MAX_PROCESSES)
      : undefined,
    execTimeoutMs: options.timeoutMs ?? SANDBOX_DEFAULT_TIMEOUT_MS,
    lifetimeMs: options.lifetimeMs,
    workingDirectory: options.workingDirectory,
    egress,
    signal: options.signal,
    snapshot: options.snapshot,
    onStep: options.onStep,
    detached: options.detached === true,
  }
}

/**
 * A resolved request whose backend enforces both limits (its definition
 * declares `memoryLimit` and `processLimit`), with their types narrowed. A
 * missing limit here is a backend's programming error.
 */
export function withEnforcedLimits(
  request: SandboxCreateRequest<number | undefined>,
): SandboxCreateRequest<number> {
  const { memoryLimitMb, maxProcesses } = request
  if (memoryLimitMb === undefined || maxProcesses === undefined)
    throw new TypeError('withEnforcedLimits: the backend declares a limit it does not enforce')
  return { ...request, memoryLimitMb, maxProcesses }
}

export interface SandboxBackendContext {
  /** Identifies the provider instance that owns everything this backend creates (owner labels). */
  readonly providerId: string
  /** The provider's resolved layout (container tier). */
  readonly layout: ResolvedContainerSandboxLayout | undefined
  readonly brokeredCredentials: readonly BrokeredCredential[]
  readonly allowInwardFor: readonly string[]
  /** Reports an event to the host's hook; never throws. */
  readonly emit: (event: SandboxEvent) => void
}

/**
 * A backend package's factory. Written as a method's type so that a
 * definition of one backend (`SandboxBackendDefinition<MyConfig>`) can stand
 * in a list of any backends' definitions without a cast: TypeScript checks
 * a method's parameters both ways, a plain function type's only one way.
 */
export type SandboxBackendFactory<Config = SandboxBackendConfigBase> = {
  create(config: Config, context: SandboxBackendContext): CordonSandboxBackend
}['create']

/** What a backend package's module exports; the umbrella imports it lazily. */
export interface SandboxBackendModule<Config = SandboxBackendConfigBase> {
  readonly createBackend: SandboxBackendFactory<Config>
}
