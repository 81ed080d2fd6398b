import type {
  CordonSandboxBackend,
  SandboxBackendContext,
  SandboxBackendOptions,
} from './backend.js'
import type { SandboxBackendConfigBase, SandboxBackendDefinition } from './backend-definition.js'
import { cleanupFailureEvent } from './cleanup-failure-event.js'
import {
  parseConfig,
  type SandboxConnectOptions,
  type SandboxCreateConfig,
  type SandboxProviderConfigFor,
  sandboxConnectOptionsSchema,
  sandboxCreateConfigSchema,
} from './config.js'
import { SANDBOX_DEFAULT_TIMEOUT_MS } from './constants.js'
import { requestRefusal } from './control-refusal.js'
import { CreateStepTimer } from './create-step-timer.js'
import {
  CredentialStore,
  decodeCredential,
  defaultCredentialStore,
  encodeCredential,
} from './credential-store.js'
import { detachedRefusal, listLiveSandboxes } from './detached-create.js'
import type { SandboxListing } from './detached-sandbox.js'
import { DENY_ALL } from './egress-policy.js'
import {
  SandboxControlRefusedError,
  SandboxCredentialRefusedError,
  SandboxError,
  SandboxNotFoundError,
  throwIfAborted,
} from './errors.js'
import { describeError } from './event-error.js'
import type { SandboxEvent, SandboxEventListener } from './events.js'
import {
  connectedForkRequest,
  type KeptCreateSettings,
  keepCreateSettings,
} from './kept-create-settings.js'
import type { ResolvedContainerSandboxLayout } from './layout.js'
import { ManagedSandbox } from './managed-sandbox.js'
import type { CordonSandboxProvider, SandboxSnapshots } from './provider.js'
import { prepareProviderConfig } from './provider-config.js'
import { policyOfRecord } from './recorded-egress.js'
import type { CordonBackendSandbox, CordonSandbox, SandboxSnapshotStore } from './sandbox.js'
import { isSandboxId, newSandboxId, type SandboxId } from './sandbox-id.js'
import {
  checkVolumeCreate,
  checkVolumeName,
  type SandboxBackendVolumes,
  type SandboxVolumes,
  volumesRefusal,
} from './volumes.js'
import { WarmPool } from './warm-pool.js'

export interface ComposeProviderOptions<Config extends SandboxBackendConfigBase> {
  readonly config: SandboxProviderConfigFor<Config>
  /** The backend's definition: its name and what it enforces, known before it is loaded. */
  readonly definition: SandboxBackendDefinition<Config>
  readonly layout: ResolvedContainerSandboxLayout | undefined
  /** Loads and constructs the backend; called once, on first use. */
  readonly loadBackend: (context: SandboxBackendContext) => Promise<CordonSandboxBackend>
}

/**
 * Builds a provider around a lazily loaded backend. The provider owns what
 * every backend shares: per-call validation and defaults, the warm pool,
 * sandbox lifetimes, `busy` status, and events. Construction does no I/O.
 */
export function composeProvider<Config extends SandboxBackendConfigBase>(
  options: ComposeProviderOptions<Config>,
): CordonSandboxProvider {
  const { config, definition, layout } = options
  const { name: backendName, enforcement } = definition
  const instanceId = `prv_${newSandboxId().slice(4)}`
  const listener: SandboxEventListener | undefined = config.onEvent
  /** Live sandboxes by id, so their egress events count toward their usage. */
  const liveById = new Map<string, ManagedSandbox>()
  const emit = (event: SandboxEvent): void => {
    if (event.type === 'egress' && event.sandboxId)
      liveById.get(event.sandboxId)?.countEgress(event.bytesUp, event.bytesDown)
    try {
      listener?.(event)
    } catch {
      // A host's event hook must never break sandbox operations.
    }
  }
  const context: SandboxBackendContext = {
    providerId: instanceId,
    layout,
    brokeredCredentials: config.brokeredCredentials ?? [],
    allowInwardFor: config.allowInwardFor ?? [],
    emit,
  }
  let backendPromise: Promise<CordonSandboxBackend> | undefined
  const backend = (): Promise<CordonSandboxBackend> => {
    backendPromise ??= options.loadBackend(context).catch((error: unknown) => {
      backendPromise = undefined
      throw error
    })
    return backendPromise
  }
  const live = new Set<ManagedSandbox>()
  let closed = false
  /** Every create, fork and connect still in flight: `close()` waits for them to settle. */
  const inFlight = new Set<Promise<unknown>>()
  const track = <T>(operation: Promise<T>): Promise<T> => {
    const settled = operation.then(
      () => {},
      () => {},
    )
    inFlight.add(settled)
    void settled.then(() => inFlight.delete(settled))
    return operation
  }
  const closedError = (): SandboxError => new SandboxError('provider is closed')
  // Without a layout the backend learns its rootDir only when it creates the sandbox: "." is that rootDir.
  const defaultWorkingDirectory = layout?.outputs.containerPath ?? '.'

  /**
   * What the backend is asked for; the exec timeout and lifetime are applied
   * around it. A limit is passed only where the host named one: the backend
   * applies its own default, and only for what it enforces.
   */
  const backendOptions = (call: SandboxCreateConfig): SandboxBackendOptions => {
    const memoryLimitMb = call.memoryLimitMb ?? config.defaultMemoryLimitMb
    const maxProcesses = call.maxProcesses ?? config.defaultMaxProcesses
    return {
      sandboxId: newSandboxId(),
      env: call.env ?? {},
      ...(memoryLimitMb !== undefined ? { memoryLimitMb } : {}),
      ...(maxProcesses !== undefined ? { maxProcesses } : {}),
      timeoutMs: call.timeoutMs ?? config.defaultTimeoutMs ?? SANDBOX_DEFAULT_TIMEOUT_MS,
      lifetimeMs: call.lifetimeMs ?? config.defaultLifetimeMs,
      workingDirectory: call.workingDirectory ?? defaultWorkingDirectory,
      egress: call.egress ?? config.defaultEgress ?? DENY_ALL,
      ...(call.signal ? { signal: call.signal } : {}),
      ...(call.detached ? { detached: true } : {}),
    }
  }

  /** Where detached sandboxes' credentials are kept; undefined with `credentialStore: false`. */
  const credentials =
    config.credentialStore === false
      ? undefined
      : new CredentialStore(config.credentialStore ?? defaultCredentialStore())

  const createFresh = async (
    request: SandboxBackendOptions,
    pooled = false,
  ): Promise<CordonBackendSandbox> => {
    const started = performance.now()
    const sandboxId = request.sandboxId
    emit({
      type: 'lifecycle',
      phase: 'create.start',
      ...(sandboxId ? { sandboxId } : {}),
      backend: backendName,
      timestamp: Date.now(),
      ...(pooled ? { pooled: true } : {}),
    })
    const steps = new CreateStepTimer()
    const timings = () => {
      const finished = steps.finish()
      return finished ? { steps: finished } : {}
    }
    try {
      if (closed && !pooled) throw closedError()
      const sandbox = await (await backend()).create({ ...request, onStep: steps.begin })
      // Made after close() began: nothing would ever remove it, so it goes now and the create fails.
      // (The warm pool destroys a refill that finishes after its close itself.)
      if (closed && !pooled) {
        await sandbox.destroy().catch((error: unknown) => {
          emit(
            cleanupFailureEvent(
              sandbox.id,
              backendName,
              'destroying a sandbox made after close()',
              error,
            ),
          )
        })
        throw closedError()
      }
      emit({
        type: 'lifecycle',
        phase: 'create.ready',
        sandboxId: sandbox.id,
        backend: backendName,
        timestamp: Date.now(),
        durationMs: performance.now() - started,
        ...timings(),
      })
      return sandbox
    } catch (error) {
      emit({
        type: 'lifecycle',
        phase: 'create.failed',
        ...(sandboxId ? { sandboxId } : {}),
        backend: backendName,
        timestamp: Date.now(),
        durationMs: performance.now() - started,
        ...timings(),
        error: describeError(error),
      })
      throw error
    }
  }

  const pool =
    config.pool && config.pool.size > 0
      ? new WarmPool<CordonBackendSandbox>({
          size: config.pool.size,
          create: () => createFresh(backendOptions({}), true),
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

  /**
   * Hands `sandbox` out. `request` is what it was made with (its clocks);
   * `forkRequest`, what its forks are made with: the same request, except
   * for a sandbox reached with `connect()` (its creator's, from the
   * credential), and it throws where no fork can be made to match.
   */
  const adopt = (
    sandbox: CordonBackendSandbox,
    request: SandboxBackendOptions,
    idleTimeoutMs: number | undefined,
    detached?: { readonly endsAt: number; readonly credential: string },
    forkRequest: () => SandboxBackendOptions = () => request,
  ): ManagedSandbox => {
    const forget = (done: ManagedSandbox): void => {
      live.delete(done)
      liveById.delete(done.id)
    }
    const managed = new ManagedSandbox(sandbox, {
      backend: backendName,
      measuredUsage: enforcement.measuredUsage,
      lifetimeMs: request.lifetimeMs,
      idleTimeoutMs,
      execTimeoutMs: request.timeoutMs ?? SANDBOX_DEFAULT_TIMEOUT_MS,
      emit,
      onDestroyed: (done) => {
        forget(done)
        // Ended: nothing is left to connect to.
        if (done.detached) credentials?.remove(done.id)
      },
      snapshots: { files: enforcement.snapshot, memory: enforcement.memorySnapshot },
      fork: (source, forkOptions) => track(fork(source, forkRequest, idleTimeoutMs, forkOptions)),
      ...(detached ? { detached, onDisconnected: forget } : {}),
    })
    live.add(managed)
    liveById.set(managed.id, managed)
    return managed
  }

  /**
   * Fork, for every backend that takes snapshots: one snapshot of the
   * source, `count` sandboxes made from it with the source's settings (each
   * its own id, and so its own user and egress client), then the snapshot
   * removed. If one cannot be made, those made are destroyed.
   */
  const fork = async (
    source: ManagedSandbox,
    forkRequest: () => SandboxBackendOptions,
    idleTimeoutMs: number | undefined,
    forkOptions: {
      readonly count: number
      readonly memory: boolean
      readonly signal?: AbortSignal
    },
  ): Promise<CordonSandbox[]> => {
    if (closed) throw new SandboxError('provider is closed')
    const store = await snapshotStore('fork')
    // Before the snapshot: a fork that cannot match its source is refused with nothing made.
    const sourceRequest = forkRequest()
    const { signal } = forkOptions
    const taken = await source.snapshotForFork({
      memory: forkOptions.memory,
      ...(signal ? { signal } : {}),
    })
    try {
      const made = await Promise.allSettled(
        Array.from({ length: forkOptions.count }, () => {
          // Forks end with this host, whatever the source: a detached one's are not detached.
          const { signal: _sourceSignal, detached: _detached, ...settings } = sourceRequest
          return createFresh({
            ...settings,
            sandboxId: newSandboxId(),
            snapshot: taken.id,
            ...(signal ? { signal } : {}),
          })
        }),
      )
      const failure = made.find((result) => result.status === 'rejected')
      if (failure) {
        await Promise.allSettled(
          made.map((result) =>
            result.status === 'fulfilled' ? result.value.destroy() : undefined,
          ),
        )
        throw failure.reason
      }
      return made.map((result) =>
        adopt(
          (result as PromiseFulfilledResult<CordonBackendSandbox>).value,
          sourceRequest,
          idleTimeoutMs,
        ),
      )
    } finally {
      // The forks keep what they run on; the snapshot itself is not the host's to keep.
      await store.remove(taken.id).catch(() => {})
    }
  }

  /** The backend's snapshots, or a refusal naming `control` where it declares none. */
  const snapshotStore = async (control: string): Promise<SandboxSnapshotStore> => {
    if (!enforcement.snapshot)
      throw new SandboxControlRefusedError(control, backendName, 'this backend takes no snapshots')
    const store = (await backend()).snapshots
    if (!store)
      throw new SandboxControlRefusedError(
        control,
        backendName,
        'the backend declares snapshots but keeps no store of them',
      )
    return store
  }

  /**
   * A create from a snapshot: the snapshot's limits and egress policy where
   * the call names none (before the provider's defaults), and a memory
   * snapshot only where the backend declares it can continue one.
   */
  const fromSnapshot = async (
    call: SandboxCreateConfig,
    request: SandboxBackendOptions,
    snapshotId: string,
  ): Promise<SandboxBackendOptions> => {
    const store = await snapshotStore('snapshot')
    const snapshot = await store.get(snapshotId, call.signal ? { signal: call.signal } : {})
    if (snapshot.memory && !enforcement.memorySnapshot)
      throw new SandboxControlRefusedError(
        'snapshot.memory',
        backendName,
        `${snapshotId} holds running processes, and this backend cannot continue them`,
      )
    const { memoryLimitMb, maxProcesses } = snapshot.limits
    const egress = call.egress ?? policyOfRecord(snapshot.egress)
    if (!egress)
      throw new SandboxControlRefusedError(
        'egress',
        backendName,
        `${snapshotId} was taken of a sandbox with a resolver policy, whose function a snapshot cannot keep; pass the create call's egress`,
      )
    return {
      ...request,
      ...(call.memoryLimitMb === undefined && memoryLimitMb !== undefined ? { memoryLimitMb } : {}),
      ...(call.maxProcesses === undefined && maxProcesses !== undefined ? { maxProcesses } : {}),
      egress,
      snapshot: snapshotId,
    }
  }

  const snapshots: SandboxSnapshots = {
    async list(listOptions = {}) {
      throwIfAborted(listOptions.signal, 'snapshots.list')
      return (await snapshotStore('snapshot')).list(listOptions)
    },
    async remove(id, removeOptions = {}) {
      throwIfAborted(removeOptions.signal, 'snapshots.remove')
      return (await snapshotStore('snapshot')).remove(id, removeOptions)
    },
  }

  /**
   * A detached sandbox the backend just made, handed out with its
   * credential, which is kept in the credential store first: a sandbox
   * whose credential cannot be kept is destroyed rather than left running
   * out of every host's reach.
   */
  const adoptDetached = async (
    sandbox: CordonBackendSandbox,
    request: SandboxBackendOptions,
    idleTimeoutMs: number | undefined,
  ): Promise<CordonSandbox> => {
    const secret = sandbox.reconnectSecret
    // The end time the backend fixed where others read it, so that every host tells the same one.
    const endsAt =
      sandbox.endsAt !== undefined && Number.isFinite(sandbox.endsAt)
        ? sandbox.endsAt
        : Date.now() + request.lifetimeMs!
    try {
      if (!secret)
        throw new SandboxError(`${backendName} made a detached sandbox without its secret`)
      const credential = encodeSandboxCredential(
        sandbox.id,
        secret,
        endsAt,
        keepCreateSettings(request),
      )
      credentials?.save({ sandboxId: sandbox.id, backend: backendName, endsAt, credential })
      return adopt(sandbox, request, idleTimeoutMs, { endsAt, credential })
    } catch (error) {
      await sandbox.destroy().catch(() => {})
      throw error
    }
  }
  const encodeSandboxCredential = (
    sandboxId: SandboxId,
    secret: string,
    endsAt: number,
    settings: KeptCreateSettings,
  ) => encodeCredential({ sandboxId, backend: backendName, secret, endsAt, settings })

  const close = async (): Promise<void> => {
    closed = true
    await pool?.close()
    // A create in flight destroys what it makes once it sees `closed`; one adopted meanwhile is in
    // `live`. The timer keeps a host that awaits close() and exits alive until they have settled, even
    // when what they wait on holds no reference to the event loop.
    const keepAlive = setInterval(() => {}, 1000)
    try {
      while (inFlight.size > 0) await Promise.allSettled([...inFlight])
    } finally {
      clearInterval(keepAlive)
    }
    await Promise.allSettled([...live].map((sandbox) => sandbox.closeWithProvider()))
    live.clear()
    if (backendPromise) await (await backendPromise.catch(() => undefined))?.close()
  }

  /** The backend's volumes, once every check a host's call must pass has passed. */
  const backendVolumes = async (
    operation: string,
    signal: AbortSignal | undefined,
  ): Promise<SandboxBackendVolumes> => {
    if (!enforcement.volumes) throw volumesRefusal(backendName)
    throwIfAborted(signal, operation)
    if (closed) throw new SandboxError('provider is closed')
    const volumes = (await backend()).volumes
    if (!volumes) throw volumesRefusal(backendName)
    return volumes
  }
  const volumes: SandboxVolumes = {
    async create(volumeOptions) {
      if (!enforcement.volumes) throw volumesRefusal(backendName)
      const { name, sizeMb } = checkVolumeCreate(volumeOptions)
      const signal = volumeOptions.signal
      return (await backendVolumes('volumes.create', signal)).create({
        name,
        sizeMb,
        ...(signal ? { signal } : {}),
      })
    },
    async list(listOptions = {}) {
      return (await backendVolumes('volumes.list', listOptions.signal)).list(listOptions)
    },
    async remove(name, removeOptions = {}) {
      if (!enforcement.volumes) throw volumesRefusal(backendName)
      checkVolumeName(name)
      return (await backendVolumes('volumes.remove', removeOptions.signal)).remove(
        name,
        removeOptions,
      )
    },
  }

  const create = async (callConfig: SandboxCreateConfig = {}): Promise<CordonSandbox> => {
    const call = parseConfig(sandboxCreateConfigSchema, callConfig, 'sandbox create config')
    throwIfAborted(call.signal, 'create')
    if (closed) throw new SandboxError('provider is closed')
    let request = backendOptions(call)
    if (call.snapshot !== undefined) {
      const refusal = requestRefusal(definition, config.backend, { snapshot: call.snapshot })
      if (refusal) throw refusal
      request = await fromSnapshot(call, request, call.snapshot)
    }
    const refusal =
      requestRefusal(definition, config.backend, request) ??
      (call.detached ? detachedRefusal(definition, request) : undefined)
    if (refusal) throw refusal
    const idleTimeoutMs = call.idleTimeoutMs ?? config.defaultIdleTimeoutMs
    if (call.detached) return adoptDetached(await createFresh(request), request, idleTimeoutMs)
    if (pool && canUsePooled(call)) {
      const claimed = pool.claim()
      if (claimed) {
        emit({
          type: 'lifecycle',
          phase: 'pool.claim',
          sandboxId: claimed.id,
          backend: backendName,
          timestamp: Date.now(),
        })
        return adopt(claimed, request, idleTimeoutMs)
      }
    }
    return adopt(await createFresh(request), request, idleTimeoutMs)
  }

  const connect = async (
    id: string,
    connectOptions: SandboxConnectOptions = {},
  ): Promise<CordonSandbox> => {
    const call = parseConfig(sandboxConnectOptionsSchema, connectOptions, 'sandbox connect options')
    throwIfAborted(call.signal, 'connect')
    if (closed) throw new SandboxError('provider is closed')
    if (!enforcement.reconnect)
      throw new SandboxControlRefusedError(
        'connect',
        backendName,
        'this backend declares no reconnect: its sandboxes end with the host process that made them',
      )
    if (!isSandboxId(id)) throw new SandboxNotFoundError(String(id), 'not a sandbox id (sbx_...)')
    const credential = call.credential ?? credentials?.load(id)?.credential
    if (!credential)
      throw new SandboxCredentialRefusedError(
        id,
        credentials
          ? `no credential given, and the credential store ${credentials.directory} holds none for it`
          : 'no credential given, and this provider keeps no credential store (credentialStore: false)',
      )
    const { secret, settings } = decodeCredential(credential, id, backendName)
    const loaded = await backend()
    if (!loaded.connect)
      throw new SandboxControlRefusedError(
        'connect',
        backendName,
        'the backend declares reconnect but has no connect()',
      )
    // The creator's exec timeout: its commands run as the creator's would.
    const execTimeoutMs =
      settings?.timeoutMs ?? config.defaultTimeoutMs ?? SANDBOX_DEFAULT_TIMEOUT_MS
    const connected = await loaded.connect({
      sandboxId: id,
      secret,
      execTimeoutMs,
      signal: call.signal,
    })
    const handle: SandboxBackendOptions = {
      sandboxId: id,
      workingDirectory: settings?.workingDirectory ?? defaultWorkingDirectory,
      timeoutMs: execTimeoutMs,
      // Its clock here runs to the end time fixed at its create.
      lifetimeMs: Math.max(1, connected.endsAt - Date.now()),
    }
    return adopt(
      connected.sandbox,
      handle,
      call.idleTimeoutMs ?? config.defaultIdleTimeoutMs,
      { endsAt: connected.endsAt, credential },
      () =>
        connectedForkRequest(settings, {
          sandboxId: id,
          backend: backendName,
          enforcement: connected.sandbox.enforcement,
          handle,
        }),
    )
  }

  return {
    id: `cordon-${backendName.replace(':', '-')}`,
    name: `@cordon/sandbox: ${backendName}`,
    environment: enforcement.environment,
    backend: backendName,
    enforcement,
    instanceId,
    snapshots,
    volumes,
    create(callConfig: SandboxCreateConfig = {}): Promise<CordonSandbox> {
      return track(create(callConfig))
    },
    async warm(warmOptions = {}): Promise<void> {
      throwIfAborted(warmOptions.signal, 'warm')
      if (!pool) return
      await pool.warm()
    },
    connect(id: string, connectOptions: SandboxConnectOptions = {}): Promise<CordonSandbox> {
      return track(connect(id, connectOptions))
    },
    async list(
      listOptions: { readonly signal?: AbortSignal } = {},
    ): Promise<readonly SandboxListing[]> {
      throwIfAborted(listOptions.signal, 'list')
      if (closed) throw new SandboxError('provider is closed')
      const loaded = await backend()
      if (loaded.list) return loaded.list(listOptions)
      return listLiveSandboxes(live)
    },
    close,
    [Symbol.asyncDispose]: close,
  }
}

/**
 * Pooled sandboxes are made with the provider's defaults. The exec timeout and
 * the lifetime are applied around the sandbox, so a call that sets only those
 * can still take one; any other per-call setting needs a fresh sandbox.
 */
function canUsePooled(call: SandboxCreateConfig): boolean {
  return (
    call.env === undefined &&
    call.memoryLimitMb === undefined &&
    call.maxProcesses === undefined &&
    call.workingDirectory === undefined &&
    call.egress === undefined &&
    call.snapshot === undefined &&
    call.detached !== true
  )
}

/**
 * A provider on one backend package without the umbrella: the config is
 * validated and refused exactly as `createSandboxProvider` does, and
 * `createBackend` is the package's own factory. Every backend package's
 * `create<Name>SandboxProvider` is this.
 */
export function standaloneProvider<Config extends SandboxBackendConfigBase>(
  config: SandboxProviderConfigFor<Config>,
  definitions: readonly SandboxBackendDefinition<Config>[],
  createBackend: (config: Config, context: SandboxBackendContext) => CordonSandboxBackend,
): CordonSandboxProvider {
  const prepared = prepareProviderConfig(config, definitions)
  return composeProvider({
    ...prepared,
    loadBackend: async (context) => createBackend(prepared.config.backend, context),
  })
}
