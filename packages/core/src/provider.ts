import {
  DEFAULT_MAX_PROCESSES,
  DEFAULT_MEMORY_LIMIT_MB,
  type SandboxBackend,
  type SandboxBackendContext,
  type SandboxCreateRequest,
} from './backend.js'
import {
  parseConfig,
  type SandboxCreateConfig,
  type SandboxProviderConfig,
  sandboxCreateConfigSchema,
} from './config.js'
import { DENY_ALL } from './egress-policy.js'
import { SandboxError, throwIfAborted } from './errors.js'
import type { SandboxEvent, SandboxEventListener } from './events.js'
import type { ResolvedContainerSandboxLayout } from './layout.js'
import { ManagedSandbox } from './managed-sandbox.js'
import type { Sandbox } from './sandbox.js'
import { newSandboxId } from './sandbox-id.js'
import { WarmPool } from './warm-pool.js'

export interface SandboxProvider {
  /** Unique per provider instance; every resource it creates is labelled with it. */
  readonly id: string
  /** `tier:runtime` of the backend, e.g. `container:docker`. */
  readonly name: string
  /** Creates a sandbox that is ready to run a command. */
  create(config?: SandboxCreateConfig): Promise<Sandbox>
  /** Fills the warm pool (if configured) and resolves when it is full. */
  warm(options?: { signal?: AbortSignal }): Promise<void>
  /** Drains the warm pool, destroys every sandbox this provider still owns, releases the backend. */
  close(): Promise<void>
}

export interface ComposeProviderOptions {
  readonly config: SandboxProviderConfig
  /** `tier:runtime`, known before the backend is loaded. */
  readonly backendName: string
  readonly layout: ResolvedContainerSandboxLayout | undefined
  /** Loads and constructs the backend; called once, on first use. */
  readonly loadBackend: (context: SandboxBackendContext) => Promise<SandboxBackend>
}

/**
 * Builds a provider around a lazily loaded backend. The provider owns what
 * every backend shares: per-call validation and defaults, the warm pool,
 * sandbox lifetimes, and events. Construction does no I/O.
 */
export function composeProvider(options: ComposeProviderOptions): SandboxProvider {
  const { config, backendName } = options
  const id = `prv_${newSandboxId().slice(4)}`
  const listener: SandboxEventListener | undefined = config.onEvent
  const emit = (event: SandboxEvent): void => {
    try {
      listener?.(event)
    } catch {
      // A host's event hook must never break sandbox operations.
    }
  }
  const context: SandboxBackendContext = {
    providerId: id,
    layout: options.layout,
    brokeredCredentials: config.brokeredCredentials ?? [],
    allowInwardFor: config.allowInwardFor ?? [],
    emit,
  }
  let backendPromise: Promise<SandboxBackend> | undefined
  const backend = (): Promise<SandboxBackend> => {
    backendPromise ??= options.loadBackend(context).catch((error: unknown) => {
      backendPromise = undefined
      throw error
    })
    return backendPromise
  }
  const live = new Set<ManagedSandbox>()
  let closed = false

  const resolveRequest = (call: SandboxCreateConfig): SandboxCreateRequest => ({
    id: newSandboxId(),
    env: call.env ?? {},
    memoryLimitMb: call.memoryLimitMb ?? config.defaultMemoryLimitMb ?? DEFAULT_MEMORY_LIMIT_MB,
    maxProcesses: call.maxProcesses ?? config.defaultMaxProcesses ?? DEFAULT_MAX_PROCESSES,
    timeoutMs: call.timeoutMs ?? config.defaultTimeoutMs,
    workingDirectory: call.workingDirectory,
    egress: call.egress ?? config.defaultEgress ?? DENY_ALL,
    signal: call.signal,
  })

  const createFresh = async (request: SandboxCreateRequest): Promise<Sandbox> => {
    const started = performance.now()
    emit({
      type: 'lifecycle',
      phase: 'create.start',
      sandboxId: request.id,
      backend: backendName,
      timestamp: Date.now(),
    })
    try {
      const sandbox = await (await backend()).create(request)
      emit({
        type: 'lifecycle',
        phase: 'create.ready',
        sandboxId: sandbox.id,
        backend: backendName,
        timestamp: Date.now(),
        durationMs: performance.now() - started,
      })
      return sandbox
    } catch (error) {
      emit({
        type: 'lifecycle',
        phase: 'create.failed',
        sandboxId: request.id,
        backend: backendName,
        timestamp: Date.now(),
        durationMs: performance.now() - started,
        error: describeError(error),
      })
      throw error
    }
  }

  const pool =
    config.pool && config.pool.size > 0
      ? new WarmPool({
          size: config.pool.size,
          create: () => createFresh(resolveRequest({})),
          onRefill: (durationMs, sandbox) =>
            emit({
              type: 'lifecycle',
              phase: 'pool.refill',
              sandboxId: sandbox.id,
              backend: backendName,
              timestamp: Date.now(),
              durationMs,
            }),
          onRefillError: (error) =>
            emit({
              type: 'lifecycle',
              phase: 'pool.refill.failed',
              backend: backendName,
              timestamp: Date.now(),
              error: describeError(error),
            }),
        })
      : undefined

  const adopt = (sandbox: Sandbox, lifetimeMs: number | undefined): Sandbox => {
    const managed = new ManagedSandbox(sandbox, {
      backend: backendName,
      lifetimeMs,
      emit,
      onDestroyed: (done) => live.delete(done),
    })
    live.add(managed)
    return managed
  }

  return {
    id,
    name: backendName,
    async create(callConfig: SandboxCreateConfig = {}): Promise<Sandbox> {
      const call = parseConfig(sandboxCreateConfigSchema, callConfig, 'sandbox create config')
      throwIfAborted(call.signal, 'create')
      if (closed) throw new SandboxError('provider is closed')
      if (pool && usesOnlyDefaults(call)) {
        const claimed = pool.claim()
        if (claimed) {
          emit({
            type: 'lifecycle',
            phase: 'pool.claim',
            sandboxId: claimed.id,
            backend: backendName,
            timestamp: Date.now(),
          })
          return adopt(claimed, config.defaultTimeoutMs)
        }
      }
      const request = resolveRequest(call)
      return adopt(await createFresh(request), request.timeoutMs)
    },
    async warm(warmOptions = {}): Promise<void> {
      throwIfAborted(warmOptions.signal, 'warm')
      if (!pool) return
      await pool.warm()
    },
    async close(): Promise<void> {
      closed = true
      await pool?.close()
      await Promise.allSettled([...live].map((sandbox) => sandbox.destroy()))
      live.clear()
      if (backendPromise) await (await backendPromise.catch(() => undefined))?.close()
    },
  }
}

/** Pooled sandboxes are made with the provider's defaults; any per-call setting needs a fresh one. */
function usesOnlyDefaults(call: SandboxCreateConfig): boolean {
  return (
    call.env === undefined &&
    call.timeoutMs === undefined &&
    call.memoryLimitMb === undefined &&
    call.maxProcesses === undefined &&
    call.workingDirectory === undefined &&
    call.egress === undefined
  )
}

function describeError(error: unknown): { name: string; code?: string; message: string } {
  if (SandboxError.isInstance(error))
    return { name: error.name, code: error.code, message: error.message }
  if (error instanceof Error) return { name: error.name, message: error.message }
  return { name: 'Error', message: String(error) }
}
