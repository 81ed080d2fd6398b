import type { BrokeredCredential } from './config.js'
import type { EgressPolicy } from './egress-policy.js'
import type { SandboxEvent } from './events.js'
import type { ResolvedContainerSandboxLayout } from './layout.js'
import type { Sandbox } from './sandbox.js'
import type { SandboxId } from './sandbox-id.js'

/**
 * The contract a backend package implements. A backend package's entry point
 * exports `createBackend` (a {@link SandboxBackendFactory}) plus its config type
 * and errors; the provider in core does validation, defaults, pooling,
 * lifetimes and events, so a backend only turns a fully resolved request into
 * an exec-ready {@link Sandbox}.
 */
export interface SandboxBackend {
  /** `tier:runtime`, e.g. `container:docker`; used in errors and events. */
  readonly name: string
  /**
   * Creates a sandbox and resolves only when it can run a command. On failure
   * or abort it removes everything it made before rejecting.
   */
  create(request: SandboxCreateRequest): Promise<Sandbox>
  /** Releases shared resources (connections, gateways). Sandboxes are destroyed by the provider. */
  close(): Promise<void>
}

/** A create request with every default already applied. */
export interface SandboxCreateRequest {
  readonly id: SandboxId
  readonly env: Readonly<Record<string, string>>
  readonly memoryLimitMb: number
  readonly maxProcesses: number
  /** Lifetime in ms after which the provider destroys the sandbox; undefined means none. */
  readonly timeoutMs: number | undefined
  readonly workingDirectory: string | undefined
  readonly egress: EgressPolicy
  readonly signal: AbortSignal | undefined
}

export interface SandboxBackendContext {
  /** Identifies the provider that owns everything this backend creates. */
  readonly providerId: string
  /** The provider's resolved layout (container tier). */
  readonly layout: ResolvedContainerSandboxLayout | undefined
  readonly brokeredCredentials: readonly BrokeredCredential[]
  readonly allowInwardFor: readonly string[]
  /** Reports an event to the host's hook; never throws. */
  readonly emit: (event: SandboxEvent) => void
}

export type SandboxBackendFactory<Config> = (
  config: Config,
  context: SandboxBackendContext,
) => SandboxBackend

/** What a backend package's module exports; the umbrella imports it lazily. */
export interface SandboxBackendModule<Config> {
  readonly createBackend: SandboxBackendFactory<Config>
}

/** Defaults used when neither the provider nor the call sets a limit. */
export const DEFAULT_MEMORY_LIMIT_MB = 512
export const DEFAULT_MAX_PROCESSES = 256
