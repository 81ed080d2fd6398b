import { Socket } from 'node:net'
import { type MuxStream, newAgentSecret, type StreamOpening } from '@cordon/agent/protocol'
import {
  AgentClient,
  AgentSandbox,
  ReleasedWithError,
  type StdioChannel,
} from '@cordon/agent/sandbox'
import type { ContainerBackendConfig } from '@cordon/builtin-backends'
import {
  type CordonBackendSandbox,
  SandboxAbortedError,
  type SandboxBackendOptions,
  SandboxControlRefusedError,
  SandboxDestroyedError,
  SandboxOperationError,
  type SandboxSnapshotStore,
} from '@cordon/core'
import {
  type BackgroundSweep,
  backgroundSweep,
  type ConnectedBackendSandbox,
  type CordonSandboxBackend,
  enforcedLayoutMounts,
  LABEL,
  newSnapshotId,
  ownerLabels,
  type ResourceRole,
  resolveBackendOptions,
  resolverRefusedEvent,
  resolveSandboxPath,
  runCreateSequence,
  type SandboxBackendConnectRequest,
  type SandboxBackendContext,
  type SandboxCreateRequest,
  type SandboxListing,
  withEnforcedLimits,
  writableRoots,
} from '@cordon/core/backend'
import type Docker from 'dockerode'
import { attachFallbackMs, waitForAgent } from './agent-readiness.js'
import {
  type AgentRuntime,
  agentRuntimeIsPresent,
  ensureAgentRuntime,
  forgetAgentRuntime,
} from './agent-runtime.js'
import { resumeOverSocketPipe, type SocketPipeSession } from './agent-socket-pipe.js'
import { attachChannel } from './attached-channel.js'
import { removeContainerAndWait } from './container-removal.js'
import {
  agentEnvironment,
  containerSpec,
  DEFAULT_CPUS,
  EGRESS_PROXY_PORT,
  fileSizeLimit,
  layoutMounts,
  MIN_MEMORY_LIMIT_MB,
  memoryAllowanceText,
  missingHostDirectory,
  ownedVolumePaths,
  proxyEnvironment,
  refuseUnmountableLayout,
  sandboxUser,
  sealedHostDirectories,
  sealedOutputPaths,
  tmpfsMounts,
  volumeMounts,
} from './container-spec.js'
import { cpuSet } from './cpu-placement.js'
import { dockerBackend, runscBackend } from './definition.js'
import {
  connectDetached,
  encodeReconnectState,
  listSandboxes,
  stopAgent,
} from './detached-connect.js'
import {
  DIRECT_SOCKET_PATH,
  DirectRoute,
  DirectSocket,
  directSocketTmpfs,
  HOST_SOCKET_PATH,
  HOST_SOCKETS_RUNTIME,
  hostSocketMount,
  wantsDirectSocket,
  wantsHostSocket,
} from './direct-socket.js'
import { openDockerTerminal } from './docker-terminal.js'
import { EgressGateway } from './egress-gateway.js'
import { endReason, explainLostCommand } from './end-reason.js'
import { connectEngine, type EngineConnection } from './engine-connection.js'
import { isMissingImage, isNotFound, translateEngineError } from './engine-errors.js'
import { EngineEvents } from './engine-events.js'
import { pauseContainer, unpauseContainer } from './engine-freezer.js'
import { engineUsage } from './engine-usage.js'
import {
  findSnapshot,
  listSnapshots,
  publicSnapshot,
  releaseSnapshotImage,
  removeSnapshot,
  restoreFilesystemSnapshot,
  type StoredSnapshot,
  snapshotRoots,
  takeFilesystemSnapshot,
} from './filesystem-snapshot.js'
import { collectGarbage } from './garbage-collect.js'
import { agentPoolThreads } from './gvisor-agent-threads.js'
import { hostInterfaceAddresses } from './host-addresses.js'
import { refuseLinkedHostTrees } from './host-dir-links.js'
import { resumeOverHostSocket } from './host-socket-resume.js'
import { forgetImageEnvironment, imageEnvironment } from './image-environment.js'
import { ImagePuller } from './image-pull.js'
import {
  type CheckpointEngine,
  checkMemorySnapshot,
  checkpointContainer,
  recordCheckpointOwner,
  recordMemorySnapshot,
  refusedForOpenSockets,
  removeCheckpointOf,
  removeMemoryCheckpoint,
  startFromCheckpoint,
} from './memory-snapshot.js'
import { DockerVolumes } from './named-volumes.js'
import { SandboxEgress } from './sandbox-egress.js'
import { sealWaitMs } from './seal-wait.js'

export const DEFAULT_READINESS_TIMEOUT_MS = 30_000

/**
 * When to sweep again after a failed create: the container's create is left
 * to finish before the cleanup runs, but only for withDeadline's settle time;
 * on an engine slower than that it can land later still.
 */
const LATE_SWEEPS_MS = [1000, 3000, 8000]
/** How long the background sweep of dead owners' leftovers may take before it is given up (and run again later). */
const DEAD_OWNER_SWEEP_TIMEOUT_MS = 5 * 60_000
/**
 * How long a restored agent may take to listen on its host-backed socket
 * once told (host-socket-resume.ts) before the resume goes through the
 * engine's exec instead: it looks every 5 ms, and listens in well under 50
 * on an idle host. Under gVisor on a loaded host a restored sandbox can be
 * slow to run again (its memory faulted back in through the ptrace
 * platform): 1 s was passed once in a full CI run, and the resume took the
 * exec. The wait is only paid by an agent that never listens (one without
 * the watch); a container with no host-backed socket goes to the exec at once.
 */
const HOST_SOCKET_RESUME_WAIT_MS = 5_000
/**
 * How long a memory snapshot waits, after the agent's answer to the suspend,
 * for the agent to close the connection it came on. An agent with the
 * host-backed socket closes its listener and then that connection in the turn
 * after its answer; gVisor cannot checkpoint the listener while it is bound
 * on the host ("Cannot save endpoint with bound host socket", seen in CI when
 * the checkpoint came first). The close arrives in milliseconds; the bound
 * covers a suspend that went over the attach, where no close comes.
 */
const SUSPENDED_LISTENER_WAIT_MS = 1_000

/**
 * How long a refused dial of the agent's socket waits for the channel to
 * close before it is reported as the transport failure it is: an agent
 * that is gone takes its container's attach with it within milliseconds.
 */
const AGENT_GONE_GRACE_MS = 3_000

/** Whether `channel` is closed, or closes within `ms`. */
function closesWithin(channel: StdioChannel, ms: number): Promise<boolean> {
  if (channel.isClosed) return Promise.resolve(true)
  return new Promise((resolve) => {
    const stopListening = channel.onClose(() => {
      clearTimeout(timer)
      resolve(true)
    })
    const timer = setTimeout(() => {
      stopListening()
      resolve(false)
    }, ms)
  })
}

/**
 * How many containers a memory snapshot's source may be continued in before
 * it is given up (the engine's "no such container" below came twice in a row
 * once, in a full backend run beside other heavy work).
 */
const CONTINUE_ATTEMPTS = 3

/** What create needs to know of the engine, read once per backend. */
interface EngineFacts {
  readonly cpus: number
  readonly runtimes: readonly string[]
}

/** How long a failed restore waits for the restored container's exit status to name it in the error. */
const RESTORE_EXIT_GRACE_MS = 1_000

/**
 * The Docker Engine backend. Each sandbox is one hardened container whose
 * entry process is cordon's agent, started from the runtime volume (so any
 * image works) and reached over the container's attached stdio; commands,
 * files, streaming, timeouts and process-tree kills all go through the agent
 * (`@cordon/agent/sandbox`, the code the microVM and ACI backends use).
 * `create()` resolves once the agent has answered a health request, and
 * removes everything it made if any step fails or the signal aborts.
 */
export class DockerBackend implements CordonSandboxBackend {
  readonly tier = 'container' as const
  readonly name: string
  private readonly definition: typeof dockerBackend
  private readonly engine: EngineConnection
  private readonly events: EngineEvents
  private readonly images: ImagePuller
  private egressGateway: EgressGateway | undefined
  /** The background sweep of what dead owners left (sweepDeadOwners). */
  private readonly deadOwnerSweep: BackgroundSweep
  /** Late removals scheduled by a failed create, by container name. */
  private readonly lateSweeps = new Map<string, NodeJS.Timeout[]>()
  private engineFactsRead: Promise<EngineFacts> | undefined
  /** The snapshots kept on this engine (filesystem-snapshot.ts). */
  readonly snapshots: SandboxSnapshotStore
  /** Named persistent volumes on this engine (named-volumes.ts). */
  readonly volumes: DockerVolumes

  constructor(
    private readonly config: ContainerBackendConfig,
    private readonly context: SandboxBackendContext,
  ) {
    this.definition = config.runtime === 'runsc' ? runscBackend : dockerBackend
    this.name = this.definition.name
    this.engine = connectEngine(config)
    this.events = new EngineEvents(this.engine.docker, context.providerId)
    this.deadOwnerSweep = backgroundSweep(
      (signal) =>
        collectGarbage({
          docker: this.engine.docker,
          engine: this.engine.description,
          signal,
          ...(config.snapshotRetentionMs !== undefined
            ? { snapshotRetentionMs: config.snapshotRetentionMs }
            : {}),
          // Dead owners are judged engine-wide; this provider's retention is for its own snapshots only.
          ...(config.labels ? { snapshotRetentionLabels: config.labels } : {}),
        }),
      DEAD_OWNER_SWEEP_TIMEOUT_MS,
    )
    this.volumes = new DockerVolumes({
      docker: this.engine.docker,
      backend: this.name,
      engine: this.engine.description,
      labels: () => ({ ...this.config.labels, ...ownerLabels(this.context.providerId) }),
    })
    this.images = new ImagePuller({
      docker: this.engine.docker,
      engine: this.engine.description,
      backend: this.name,
      registryAuth: config.registryAuth,
      emit: context.emit,
    })
    const docker = this.engine.docker
    this.snapshots = {
      get: async (id, options = {}) =>
        publicSnapshot(await findSnapshot(docker, id, this.name, options.signal)),
      list: async (options = {}) =>
        (await listSnapshots(docker, options.signal)).map(publicSnapshot),
      remove: async (id, options = {}) => {
        await removeSnapshot(docker, id, this.name, options.signal)
        // A memory snapshot's checkpoint goes with its record; a sandbox started from it has its own copy.
        await removeCheckpointOf(docker, id)
      },
    }
  }

  /**
   * The engine machine's CPU count (0 if the engine does not say) and the
   * names of its runtimes, read once.
   */
  private engineFacts(): Promise<EngineFacts> {
    this.engineFactsRead ??= this.engine.docker.info().then(
      (info: { NCPU?: number; Runtimes?: Record<string, unknown> }) => ({
        cpus: info.NCPU ?? 0,
        runtimes: Object.keys(info.Runtimes ?? {}),
      }),
      () => {
        this.engineFactsRead = undefined
        return { cpus: 0, runtimes: [] }
      },
    )
    return this.engineFactsRead
  }

  private runtime(): Promise<AgentRuntime> {
    return ensureAgentRuntime(
      this.engine.docker,
      this.engine.endpoint,
      this.config.image,
      this.name,
    )
  }

  /**
   * Once per backend, in the background: removes what hosts that died left
   * on this engine. Their sandboxes and gateways end by themselves when
   * their attach closes; anything else (what an older version made, a
   * container the engine could not remove) would otherwise stay until
   * someone ran `cordon gc`. Only resources whose owner is provably gone (or
   * whose lifetime passed) are touched: an owner in another PID namespace or
   * on another machine sharing this engine cannot be seen from here and is
   * kept (judgeOwner). Snapshots past `snapshotRetentionMs` go only where
   * they carry this provider's `labels` (with none, every one on the
   * engine). Off with `sweepDeadOwners: false`. A sweep that
   * failed (the engine busy or away) is run again by the next create;
   * `close()` stops one in progress.
   */
  private sweepDeadOwners(): void {
    if (this.config.sweepDeadOwners !== false) this.deadOwnerSweep.run()
  }

  async create(options: SandboxBackendOptions): Promise<CordonBackendSandbox> {
    try {
      return await this.createSandbox(options)
    } catch (error) {
      // Its runtime volume was removed under this process: prepared again, and tried once more.
      if (
        options.signal?.aborted ||
        SandboxControlRefusedError.isInstance(error) ||
        !(await this.runtimeWentAway())
      )
        throw error
      return this.createSandbox(options)
    }
  }

  /**
   * Whether the runtime this process prepared is gone from the engine (see
   * agentRuntimeIsPresent); if so it is forgotten, so the next create fills
   * the volume again.
   */
  private async runtimeWentAway(): Promise<boolean> {
    const runtime = await this.runtime().catch(() => undefined)
    if (!runtime) return false
    const present = await agentRuntimeIsPresent(this.engine.docker, runtime).catch(() => true)
    if (present) return false
    forgetAgentRuntime(this.engine.endpoint, this.config.image)
    return true
  }

  private async createSandbox(options: SandboxBackendOptions): Promise<CordonBackendSandbox> {
    const request = withEnforcedLimits(resolveBackendOptions(options, this.definition, this.config))
    const layout = this.context.layout
    if (!layout) {
      throw new SandboxControlRefusedError(
        'layout',
        this.name,
        'the container tier needs a layout with an outputs mount',
      )
    }
    // The provider refused these when it was made; a backend made without
    // one (createBackend) meets them here, before anything exists.
    const refused = this.definition.layoutRefusal?.(layout)
    if (refused) throw new SandboxControlRefusedError(refused.control, this.name, refused.reason)
    refuseUnmountableLayout(layout, this.name)
    await refuseLinkedHostTrees(layout, this.engine.socketPath)
    if (request.memoryLimitMb < MIN_MEMORY_LIMIT_MB) {
      throw new SandboxControlRefusedError(
        'memoryLimitMb',
        this.name,
        `${request.memoryLimitMb} MiB is below the minimum of ${MIN_MEMORY_LIMIT_MB} MiB; the sandbox's memory limit is ${memoryAllowanceText(this.config)}`,
      )
    }
    this.sweepDeadOwners()
    const captured = snapshotRoots(layout)
    let snapshot: StoredSnapshot | undefined
    if (request.snapshot !== undefined) {
      snapshot = await findSnapshot(this.engine.docker, request.snapshot, this.name, request.signal)
      const missing = snapshot.roots.filter((root) => !captured.includes(root))
      if (missing.length > 0)
        throw new SandboxControlRefusedError(
          'snapshot',
          this.name,
          `${snapshot.id} holds files of ${missing.join(', ')}, which this provider's layout does not mount as writable ephemeral directories`,
        )
    }
    // A memory snapshot continues processes that were set up for one container's
    // shape: the same mounts, the same user, an egress port or none.
    let checkpointEngine: CheckpointEngine | undefined
    if (snapshot?.memory) {
      checkpointEngine = await checkMemorySnapshot(this.engine.docker, {
        backend: this.name,
        runtime: this.config.runtime === 'runsc' ? 'runsc' : 'runc',
        detached: request.detached === true,
        layout,
        engineIsLocal: this.engine.socketPath !== undefined,
      })
      const extra = captured.filter((root) => !snapshot!.roots.includes(root))
      if (extra.length > 0)
        throw new SandboxControlRefusedError(
          'snapshot',
          this.name,
          `${snapshot.id} holds running processes of a sandbox without ${extra.join(', ')}, which this provider's layout mounts: its processes continue only in a sandbox of the same shape`,
        )
      if ((snapshot.egress.kind === 'deny-all') !== (request.egress.kind === 'deny-all'))
        throw new SandboxControlRefusedError(
          'egress',
          this.name,
          `${snapshot.id} holds running processes of a sandbox with egress "${snapshot.egress.kind}"; a sandbox continuing them keeps ${snapshot.egress.kind === 'deny-all' ? 'no network' : 'its egress port'}, so its egress must be ${snapshot.egress.kind === 'deny-all' ? '"deny-all"' : 'a "static", "resolver" or "allow-all" policy'}`,
        )
    }
    const image = snapshot?.image ?? this.config.image
    const baseImage = snapshot?.baseImage ?? this.config.image
    const workingDirectory = resolveSandboxPath(
      layout.outputs.containerPath,
      request.workingDirectory,
    )
    const name = `cordon-${request.id}`
    // A retry of this create (see create) would otherwise be removed by the sweeps of the failed try.
    for (const sweep of this.lateSweeps.get(name) ?? []) clearTimeout(sweep)
    this.lateSweeps.delete(name)
    const proxied = request.egress.kind !== 'deny-all' ? request.egress : undefined
    const timeoutMs = this.config.readyTimeoutMs ?? DEFAULT_READINESS_TIMEOUT_MS
    let channel: StdioChannel | undefined
    let egress: SandboxEgress | undefined
    let registering: Promise<SandboxEgress> | undefined
    // Command and file streams go over the direct socket once the agent is up (direct-socket.ts).
    const directWanted = wantsDirectSocket(this.config, this.engine.socketPath)
    // Under gVisor the host dials a second socket, on its own side of gVisor (direct-socket.ts).
    // (Known once the engine's runtimes are, below.)
    let hostSocketWanted = false
    const findDirect = (containerId: string): Promise<DirectSocket | undefined> =>
      hostSocketWanted
        ? DirectSocket.findOnHost(this.engine.docker, containerId)
        : DirectSocket.find(this.engine.docker, containerId)
    // A detached agent always listens there: it is how a host reaches it again (detached-connect.ts).
    // Under gVisor every agent listens there too: after a memory snapshot's
    // restore its session is carried over it (agent-socket-pipe.ts).
    const listensDirect = directWanted || request.detached || this.config.runtime === 'runsc'
    let disconnected = false
    let direct: DirectRoute | undefined
    /** What carries the session of a sandbox continued from a checkpoint (see resumeOverPipe). */
    let sessionPipe: SocketPipeSession | undefined
    const closeDirect = (): void => {
      direct?.close()
    }

    const sealsOutputs = sealedOutputPaths(layout).length > 0
    const volumesWanted = volumeMounts(layout)
    const ownsVolumes = ownedVolumePaths(layout).length > 0
    let volumesMounted = false
    const remove = async (): Promise<void> => {
      closeDirect()
      const running = channel !== undefined && (!channel.isClosed || request.detached)
      channel?.close()
      // A detached agent outlives its channel: it is told to end (sealing its outputs) instead.
      if (request.detached && running) await stopAgent(this.engine.docker, name)
      // The agent seals host-visible outputs as it ends; let it finish before the engine kills it.
      const sealWait = sealWaitMs()
      const sealCutShort = running && sealsOutputs && !(await this.waitForExit(name, sealWait))
      await this.removeContainer(name)
      // Released: gc's retention counts from here.
      if (volumesMounted) await this.volumes.recordUse(volumesWanted.map((volume) => volume.name))
      await (egress ?? (await registering?.catch(() => undefined)))?.close()
      // The last sandbox made from a removed snapshot takes its image along.
      if (snapshot) await releaseSnapshotImage(this.engine.docker, snapshot.imageId)
      // Everything is removed by now: the sandbox is destroyed, and the failure only warns.
      if (sealCutShort)
        throw new ReleasedWithError(
          new SandboxOperationError(
            'destroy',
            `sandbox ${request.id}: its agent was still sealing ${sealedHostDirectories(layout).join(', ')} after ${sealWait / 1000} s and was stopped: what it had not reached may hold FIFOs, set-id files and links that lead out; do not hand the directory to other tools`,
          ),
        )
    }
    const removeAfterFailure = async (): Promise<void> => {
      // No sandbox was handed out: its create's cleanup reports the seal's failure itself.
      await remove().catch((error: unknown) => {
        throw error instanceof ReleasedWithError ? error.reported : error
      })
      // A create call slower than the settle time may still land on the engine; sweep once more shortly after.
      const sweeps = LATE_SWEEPS_MS.map((delay, index) =>
        setTimeout(() => {
          if (index === LATE_SWEEPS_MS.length - 1) this.lateSweeps.delete(name)
          void this.removeContainer(name).catch(() => {})
        }, delay).unref(),
      )
      this.lateSweeps.set(name, sweeps)
    }

    return runCreateSequence(
      {
        sandboxId: request.id,
        backend: this.name,
        timeoutMs,
        signal: request.signal,
        onStep: request.onStep,
        emit: this.context.emit,
        firstStep: 'reading the image',
        cleanup: removeAfterFailure,
        cleanupWhat: `removing container ${name}`,
      },
      async ({ signal, step }) => {
        await this.events.start()
        // Everything after needs the image (the runtime's filler and the
        // gateway run from it too): a missing one is pulled before anything else starts.
        step('reading the image')
        let imageEnv = await imageEnvironment(this.engine.docker, image).catch((error: unknown) => {
          if (isNotFound(error) && !snapshot) return undefined
          throw error
        })
        if (!imageEnv) {
          step(`pulling the image ${this.config.image}`)
          await this.images.pull(this.config.image, signal)
          step('reading the image')
          imageEnv = await imageEnvironment(this.engine.docker, this.config.image)
        }
        step('preparing the agent runtime')
        const [runtime, engine] = await Promise.all([this.runtime(), this.engineFacts()])
        const engineCpus = engine.cpus
        hostSocketWanted = wantsHostSocket({
          config: this.config,
          engineSocketPath: this.engine.socketPath,
          engineRuntimes: engine.runtimes,
          writableHostMounts: sealsOutputs || ownsVolumes,
        })
        if ((sealsOutputs || ownsVolumes) && !runtime.launcher) {
          // The launcher's filter is what stops one fallocate() from taking the host's disk.
          throw new SandboxControlRefusedError(
            'layout',
            this.name,
            `a writable hostDir or volume needs cordon-launcher, and @cordon/agent has none for this architecture (linux/${process.arch}); mount it read-only or use an ephemeral mount`,
          )
        }
        let volumeSizes = new Map<string, number>()
        if (volumesWanted.length > 0) {
          step('checking the volumes')
          volumeSizes = await this.volumes.checkMounts(volumesWanted)
        }
        // Processes restored from a memory snapshot keep the uid they ran as (see the README).
        const user = snapshot?.user ?? sandboxUser(this.config, request.id)
        let secret = newAgentSecret()
        if (proxied) {
          step('registering at the egress gateway')
          registering = SandboxEgress.register(
            this.gateway(),
            request.id,
            proxied,
            this.context.brokeredCredentials,
            (problem) => this.context.emit(resolverRefusedEvent(request.id, this.name, problem)),
          )
          registering.catch(() => {})
        }
        // One end time for every label of it and for the creator's handle (sandbox.endsAt).
        const expiresAt =
          request.lifetimeMs !== undefined ? Date.now() + request.lifetimeMs : undefined
        step('creating the container')
        const spec = {
          ...containerSpec({
            name,
            config: this.config,
            request,
            runtime,
            image,
            mounts: [
              ...layoutMounts(layout, runtime, this.name, this.engine.socketPath),
              ...(hostSocketWanted
                ? [hostSocketMount(this.labels(request, 'agent-socket', expiresAt))]
                : []),
            ],
            tmpfs: {
              ...tmpfsMounts(this.config, layout, user),
              ...(listensDirect ? directSocketTmpfs() : {}),
            },
            fileSizeBytes: fileSizeLimit(layout, volumeSizes),
            handsOverOutputs: sealsOutputs,
            ownsVolumes,
            labels: this.labels(request, 'sandbox', expiresAt),
            ...(hostSocketWanted ? { engineRuntime: HOST_SOCKETS_RUNTIME } : {}),
            // Not under gVisor: pinned to fewer cores, its ptrace platform leaves
            // the stubs of exited processes unreaped, and a loop of short
            // commands grew the sandbox past 5,000 host pids in 25 s (the pids
            // limit then ends it). `--cpu-num-from-quota` sizes what it reports.
            cpuSet:
              this.config.runtime === 'runsc'
                ? undefined
                : cpuSet(this.config.cpus ?? DEFAULT_CPUS, engineCpus, request.id),
            env: agentEnvironment({
              layout,
              workingDirectory,
              user,
              egressPort: proxied ? EGRESS_PROXY_PORT : undefined,
              lifetimeMs: request.lifetimeMs,
              directSocket: listensDirect ? DIRECT_SOCKET_PATH : undefined,
              hostSocket: hostSocketWanted ? HOST_SOCKET_PATH : undefined,
              launcher: runtime.launcher,
              volumeSizes,
              detached: request.detached,
              poolThreads: agentPoolThreads(this.config.runtime),
            }),
          }),
        } as Docker.ContainerCreateOptions
        // Not cut off by the signal: cut off here, the engine can still make
        // the container after the cleanup looked for it. The cleanup waits
        // for this call (withDeadline's settle), and the signal is looked at
        // once it returns.
        let container = await this.engine.docker.createContainer(spec).catch(async (error) => {
          const missing = missingHostDirectory(error, layout)
          if (missing) throw missing
          // Removed from the engine since this backend last looked: pulled again, as docker run would.
          if (!isMissingImage(error) || snapshot) throw error
          forgetImageEnvironment(this.engine.docker, this.config.image)
          step(`pulling the image ${this.config.image}`)
          await this.images.pull(this.config.image, signal)
          step('creating the container')
          return this.engine.docker.createContainer(spec)
        })
        signal.throwIfAborted()
        if (volumesWanted.length > 0) {
          // Again with this container on the engine: of two creates racing
          // for one volume, each sees the other here, and neither goes on unseen.
          step('claiming the volumes')
          await this.volumes.checkClaims(volumesWanted, container.id)
          volumesMounted = true
          await this.volumes.recordUse(volumesWanted.map((volume) => volume.name))
        }
        /**
         * Resumes a suspended agent in `target` (a container started from a
         * checkpoint, or the one a checkpoint failed on) with `fresh` as its
         * secret, its session moved onto a connection to its direct socket
         * (agent-socket-pipe.ts): from then on `channel` is that session.
         */
        const resumeOverPipe = async (
          target: Docker.Container,
          fresh: string,
          lifetimeMs: number | null | undefined,
          resumeSignal: AbortSignal,
        ): Promise<void> => {
          // Past the engine where the agent has a host-backed socket; else through an exec's pipe.
          const overHostSocket = hostSocketWanted
            ? await resumeOverHostSocket({
                docker: this.engine.docker,
                containerId: target.id,
                secret: fresh,
                lifetimeMs,
                signal: resumeSignal,
                listenWithinMs: HOST_SOCKET_RESUME_WAIT_MS,
                onStream: fromAgent,
              })
            : undefined
          sessionPipe =
            overHostSocket ??
            (await resumeOverSocketPipe({
              docker: this.engine.docker,
              containerId: target.id,
              entrypoint: runtime.agentEntrypoint,
              secret: fresh,
              lifetimeMs,
              signal: resumeSignal,
              onStream: fromAgent,
            }))
          channel = sessionPipe.channel
        }
        // Connections the sandbox made to its proxy port go to its gateway client.
        const fromAgent = (stream: MuxStream, opening: StreamOpening): void => {
          if (opening.kind === 'egress' && proxied && egress) {
            this.egressGateway?.connect(request.id, stream)
          } else stream.destroy()
        }
        step('attaching to the container')
        const attach = (to: Docker.Container) => attachChannel(to, this.engine.docker, fromAgent)
        channel = await attach(container)
        // Before the agent starts, so that the agent's own lifetime (counted
        // from its start, or its resume) never begins before this: a sandbox
        // its lifetime ended is told from one lost, however slow the create.
        const startedAt = Date.now()
        if (snapshot?.memory && checkpointEngine) {
          step('starting the container from the memory snapshot')
          await startFromCheckpoint(
            this.engine.docker,
            checkpointEngine,
            container.id,
            snapshot.id,
            signal,
          )
          // The restored agent waits for its own secret, and its own lifetime from now.
          step('resuming the restored agent')
          await resumeOverPipe(container, secret, request.lifetimeMs ?? null, signal)
        } else {
          step('starting the container')
          await container.start()
          channel.sendPreface(`${secret}\n`)
        }
        // Found while the agent boots; used once it has answered.
        if (directWanted || hostSocketWanted) direct = new DirectRoute(findDirect(container.id))
        step('waiting for the agent')
        const client = new AgentClient({
          secret,
          description: `container ${name}`,
          // Both kinds; port forwards stay on the attach.
          dial: async (attempt, kind) => {
            if (!direct) return channel!.open({ kind })
            try {
              return await direct.dial(attempt, () => channel!.open({ kind }))
            } catch (error) {
              // Refused after it worked: the agent has gone, and with it the
              // container (gVisor ends the whole sandbox on an OOM kill),
              // which the channel tells once it closes. The call then meets a
              // destroyed sandbox, as it would have on the attach.
              const current = channel
              if (current && (await closesWithin(current, AGENT_GONE_GRACE_MS)))
                throw new SandboxDestroyedError(request.id)
              throw error
            }
          },
          // Under gVisor, uploads hand the agent pieces as files beside its host-backed socket.
          uploadStage: () => direct?.uploadStage(),
          onSpare: (stream, spare) => {
            // A waiting spare keeps no host process alive, whichever way it goes.
            if (stream instanceof Socket) {
              if (spare) stream.unref()
              else stream.ref()
            } else channel?.setSpare(stream, spare)
          },
        })
        const [registered] = await Promise.all([
          registering,
          waitForAgent(
            client,
            request.id,
            signal,
            channel,
            direct && { route: direct, attachAfterMs: attachFallbackMs(this.config.runtime) },
          ),
        ])
        egress = registered
        direct?.enable()
        const inContainer = {
          docker: this.engine.docker,
          containerId: container.id,
          runtime,
          agent: client,
          user,
        }
        if (snapshot && !snapshot.memory) {
          step('restoring the snapshot')
          await restoreFilesystemSnapshot({ ...inContainer, signal }, snapshot)
        }
        /**
         * A memory snapshot of this sandbox: its agent ends its channel's
         * session, the engine checkpoints the container (which stops it, and
         * removes it: this runsc cannot leave it running), and the sandbox goes
         * on in a container of the same name and spec started from that
         * checkpoint, its agent given a new secret. What the checkpoint keeps
         * is a session that is over and a secret that opens nothing.
         */
        let checkpointing = false
        // The agent listens on its host-backed socket again before it answers a resume.
        const rediscoverDirect = (containerId: string): void => {
          if (!hostSocketWanted) return
          direct = new DirectRoute(findDirect(containerId))
          direct.enable()
        }
        const takeMemorySnapshot = async (
          snapshotSignal: AbortSignal | undefined,
          forFork: boolean,
        ): Promise<StoredSnapshot> => {
          const docker = this.engine.docker
          const engine = await checkMemorySnapshot(docker, {
            backend: this.name,
            runtime: this.config.runtime === 'runsc' ? 'runsc' : 'runc',
            detached: request.detached === true,
            layout,
            engineIsLocal: this.engine.socketPath !== undefined,
          })
          snapshotSignal?.throwIfAborted()
          const owner = { ...this.config.labels, ...ownerLabels(this.context.providerId) }
          const id = newSnapshotId()
          const createdAt = Date.now()
          checkpointing = true
          try {
            // Asked of the agent, which sees every socket: refused here leaves the sandbox untouched.
            // With the host-backed socket, until the agent has closed it (SUSPENDED_LISTENER_WAIT_MS).
            await client
              .suspendChannel(snapshotSignal, {
                refuseOpenTcp: true,
                ...(hostSocketWanted ? { waitForCloseMs: SUSPENDED_LISTENER_WAIT_MS } : {}),
              })
              .catch((error: unknown) => {
                throw refusedForOpenSockets(error, this.name)
              })
            // The pipe's process would be caught in the checkpoint, holding a pipe no restored sandbox has.
            await sessionPipe?.closeAndWait()
            sessionPipe = undefined
            // The agent closed its host-backed socket for the checkpoint; the route is found again after.
            closeDirect()
            direct = undefined
            try {
              // First: a host that dies from here on leaves a checkpoint its gc can place and judge.
              recordCheckpointOwner(engine, id, owner)
              // Not cut off by the signal: a checkpoint stopped half-way leaves the container in no known state.
              await checkpointContainer(docker, engine, container.id, id)
            } catch (error) {
              removeMemoryCheckpoint(engine.rootDir, id)
              // Still running, its agent waiting: resumed with the secret it had.
              await resumeOverPipe(container, secret, undefined, AbortSignal.timeout(timeoutMs))
                .then(() => {
                  client.rekey(secret)
                  watchChannel(channel!)
                  rediscoverDirect(container.id)
                })
                .catch(() => sandbox.markLost('lost'))
              throw error
            }
            const recording = recordMemorySnapshot(
              {
                ...inContainer,
                backend: this.name,
                sandboxId: request.id,
                roots: captured,
                baseImage,
                enforcement: sandbox.enforcement,
                ownerLabels: owner,
                forFork,
              },
              engine,
              id,
              createdAt,
            )
            recording.catch(() => {})
            // Named in the error: a failure here has several causes the engine words alike ("no such container").
            let stage = 'removing the checkpointed container'
            let restoredId: string | undefined
            try {
              // The source goes on: the engine removes its stopped container, and one of the same spec continues it.
              let next: Docker.Container | undefined
              for (let attempt = 1; !next; attempt++) {
                stage = 'removing the checkpointed container'
                await this.removeContainer(name)
                stage = 'creating the container that continues it'
                const made = await docker.createContainer(spec)
                restoredId = made.id
                container = made
                inContainer.containerId = made.id
                // Attached, as the engine's start expects; gVisor never wakes it (resumeOverPipe).
                stage = 'attaching to it'
                channel = await attach(made)
                stage = 'starting it from the checkpoint'
                try {
                  await startFromCheckpoint(docker, engine, made.id, id)
                  next = made
                } catch (error) {
                  // Seen three times, in two full test runs on a loaded machine:
                  // the engine answered the start of the container just made
                  // with "no such container". The checkpoint is still whole:
                  // once more in a new container.
                  if (attempt >= CONTINUE_ATTEMPTS || !isNotFound(error)) throw error
                  channel.close()
                }
              }
              const fresh = newAgentSecret()
              const resumeSignal = AbortSignal.timeout(timeoutMs)
              stage = 'resuming its agent'
              await resumeOverPipe(next, fresh, undefined, resumeSignal)
              checkpointing = false
              watchChannel(channel!)
              secret = fresh
              client.rekey(fresh)
              stage = 'waiting for its agent'
              await waitForAgent(client, request.id, resumeSignal, channel!, undefined)
              rediscoverDirect(next.id)
            } catch (error) {
              checkpointing = false
              sandbox.markLost('lost')
              // A restored container that ended by itself (its restore failed) has an exit status in the engine's events.
              const exited =
                restoredId === undefined
                  ? undefined
                  : await this.events.exitCode(restoredId, RESTORE_EXIT_GRACE_MS)
              void remove().catch(() => {})
              const stored = await recording.catch(() => undefined)
              if (stored) await removeSnapshot(docker, id, this.name).catch(() => {})
              removeMemoryCheckpoint(engine.rootDir, id)
              throw new SandboxOperationError(
                'snapshot',
                `the sandbox's processes were checkpointed, but the sandbox could not go on from its checkpoint, and has ended (${stage}${exited === undefined ? '' : `; the restored container exited with status ${exited}`}): ${(error as Error).message}`,
                { cause: error },
              )
            }
            return await recording
          } finally {
            checkpointing = false
          }
        }
        const sandboxEnv = {
          HOME: '/tmp',
          ...imageEnv,
          ...request.env,
          ...(proxied ? proxyEnvironment() : {}),
        }
        const sandbox: AgentSandbox = new AgentSandbox({
          id: request.id,
          rootDir: layout.outputs.containerPath,
          writeRoots: writableRoots(layout),
          connectPort: (port) => channel!.open({ kind: 'connect', port }),
          measureUsage: (usageSignal) => engineUsage(this.engine.docker, container.id, usageSignal),
          env: sandboxEnv,
          openTerminal: (terminalOptions) =>
            openDockerTerminal(
              {
                docker: this.engine.docker,
                containerId: container.id,
                sandboxId: request.id,
                user,
                env: sandboxEnv,
                workingDirectory,
                agent: client,
                launcher: runtime.launcher,
                backend: this.name,
                gvisor: this.config.runtime === 'runsc',
              },
              terminalOptions,
            ).catch((error: unknown) => {
              throw translateEngineError(error, this.name, this.engine.description, 'openTerminal')
            }),
          workingDirectory,
          // gVisor's inotify is its own kernel's: it sees what the sandbox does, not what the host does.
          watchesExternalChanges: this.config.runtime !== 'runsc',
          execTimeoutMs: request.execTimeoutMs,
          client,
          backend: this.name,
          environment: this.definition.enforcement.environment,
          enforcement: {
            backend: this.name,
            isolation: this.definition.enforcement.isolation,
            runtime: this.config.runtime === 'runsc' ? 'runsc' : 'runc',
            egress: {
              kind: request.egress.kind,
              ...(request.egress.kind === 'static'
                ? { allowedHosts: request.egress.allowedHosts }
                : {}),
            },
            limits: {
              memoryLimitMb: request.memoryLimitMb,
              maxProcesses: request.maxProcesses,
              cpus: this.config.cpus ?? DEFAULT_CPUS,
            },
            user: { uid: user.uid, gid: user.gid },
            mounts: [
              ...enforcedLayoutMounts(layout),
              {
                path: '/tmp',
                access: 'read-write',
                noexec: this.config.tmpfsNoexec === true,
              },
            ],
          },
          emit: this.context.emit,
          release: async () => {
            await remove()
            this.events.forget(container.id)
          },
          // A memory snapshot ends the container on purpose (its streams drop
          // with the session); what failed then is not a sign of loss.
          explainLostCommand: async (startedAt) =>
            checkpointing ? undefined : explainLostCommand(this.events, container.id, startedAt),
          // The engine's freezer: the cgroup freezer under runc, the sandbox's own pause under gVisor.
          freezer: {
            pause: (freezeSignal) =>
              this.engineCall('pause', () => pauseContainer(container, freezeSignal)),
            resume: (thawSignal) =>
              this.engineCall('resume', () => unpauseContainer(container, thawSignal)),
          },
          snapshot: async (snapshotOptions) => {
            if (snapshotOptions.memory) {
              const { signal: memorySignal } = snapshotOptions
              const taken = await takeMemorySnapshot(memorySignal, snapshotOptions.forFork === true)
              // The checkpoint is never cut off half-way (above): an abort meanwhile
              // is answered once it is done, and what it made goes.
              if (memorySignal?.aborted) {
                await this.snapshots.remove(taken.id).catch(() => {})
                throw new SandboxAbortedError('snapshot', { cause: memorySignal.reason })
              }
              return publicSnapshot(taken)
            }
            const taken = await takeFilesystemSnapshot({
              ...inContainer,
              backend: this.name,
              sandboxId: request.id,
              roots: captured,
              baseImage,
              enforcement: sandbox.enforcement,
              ownerLabels: { ...this.config.labels, ...ownerLabels(this.context.providerId) },
              forFork: snapshotOptions.forFork,
              signal: snapshotOptions.signal,
            }).catch((error: unknown) => {
              throw translateEngineError(error, this.name, this.engine.description, 'snapshot')
            })
            return publicSnapshot(taken)
          },
          ...(request.detached
            ? {
                ...(expiresAt !== undefined ? { endsAt: expiresAt } : {}),
                reconnectSecret: encodeReconnectState({
                  secret,
                  env: request.env,
                  workingDirectory,
                  memoryLimitMb: request.memoryLimitMb,
                  maxProcesses: request.maxProcesses,
                  // What this gateway enforces; a host that connects enforces it at its own (detached-egress.ts).
                  ...(egress ? { egress: egress.registered } : {}),
                }),
                disconnect: async () => {
                  disconnected = true
                  closeDirect()
                  channel?.close()
                  this.events.forget(container.id)
                  // Its agent refuses every egress connection from now until a host connects.
                  await egress?.close()
                },
              }
            : {}),
          setNetworkPolicy: async (policy) => {
            if (request.detached && egress) {
              throw new SandboxControlRefusedError(
                'setNetworkPolicy',
                this.name,
                'a detached sandbox keeps the policy it was created with: a host that connects to it later enforces that one (kept in its credential), so a change made here would not last',
              )
            }
            if (!egress) {
              throw new SandboxControlRefusedError(
                'setNetworkPolicy',
                this.name,
                'this sandbox was created with egress "deny-all": it has no network and no egress gateway to reconfigure',
              )
            }
            await egress.setAllowedHosts(policy)
          },
        })
        // The container ending underneath leaves a sandbox that can run nothing more;
        // the engine's events tell an out-of-memory kill (gVisor: the whole sandbox)
        // and the agent ending it for a storage cap (its exit status) from its own
        // lifetime ending it and from the engine going away. A memory snapshot
        // ends the container on purpose and goes on in another (takeMemorySnapshot).
        const watchChannel = (watched: StdioChannel): void => {
          watched.onClose(() => {
            if (watched !== channel || checkpointing) return
            closeDirect()
            if (sandbox.status === 'destroyed' || disconnected) return
            const closedAt = Date.now()
            sandbox.markLost(
              endReason(this.events, container.id, {
                startedAt,
                closedAt,
                lifetimeMs: request.lifetimeMs,
              }),
            )
          })
        }
        watchChannel(channel)
        step('making the working directory')
        await sandbox.prepareWorkingDirectory(signal)
        return sandbox
      },
    ).catch((error: unknown) => {
      throw translateEngineError(error, this.name, this.engine.description, 'create')
    })
  }

  /** An engine call, its failure translated into cordon's errors naming this engine. */
  private async engineCall(operation: string, call: () => Promise<unknown>): Promise<void> {
    try {
      await call()
    } catch (error) {
      throw translateEngineError(error, this.name, this.engine.description, operation)
    }
  }

  /** `expiresAt`: when its lifetime ends it, ms since the epoch (`cordon.expires`); undefined for none. */
  private labels(
    request: SandboxCreateRequest,
    role: ResourceRole,
    expiresAt: number | undefined,
  ): Record<string, string> {
    const owner = ownerLabels(this.context.providerId)
    if (request.detached) {
      // No process owns a detached sandbox: its end time does. Without the
      // owner's pid, no sweep (of this version or an older one) takes the
      // creator's exit for the sandbox's end; each keeps it until it expires.
      delete owner[LABEL.ownerPid]
      delete owner[LABEL.ownerStart]
    }
    return {
      ...this.config.labels,
      ...owner,
      [LABEL.sandbox]: request.id,
      [LABEL.role]: role,
      ...(expiresAt !== undefined ? { [LABEL.expires]: String(expiresAt) } : {}),
      ...(request.detached ? { [LABEL.detached]: '1' } : {}),
    }
  }

  private gateway(): EgressGateway {
    this.egressGateway ??= new EgressGateway(this.engine.docker, {
      image: this.config.image,
      runtime: () => this.runtime(),
      hosts: this.config.gatewayHosts ?? {},
      allowedPorts: this.config.gatewayAllowedPorts,
      upstreamCa: this.config.gatewayUpstreamCa,
      context: this.context,
      extraLabels: this.config.labels ?? {},
      hostAddresses: this.engine.socketPath === undefined ? undefined : hostInterfaceAddresses,
    })
    return this.egressGateway
  }

  /** Resolves when the container has stopped (or is gone), or after `timeoutMs`. */
  /** Whether the container stopped (or was gone) within `timeoutMs`. */
  private async waitForExit(name: string, timeoutMs: number): Promise<boolean> {
    let timer: NodeJS.Timeout | undefined
    const stopped = await Promise.race([
      this.engine.docker
        .getContainer(name)
        .wait({ condition: 'not-running' })
        .then(
          () => true,
          () => true,
        ),
      new Promise<boolean>((resolve) => {
        timer = setTimeout(() => resolve(false), timeoutMs)
      }),
    ])
    clearTimeout(timer)
    return stopped
  }

  /**
   * Removes the container and resolves once the engine no longer has it. A
   * container whose channel just closed is often already being removed by
   * the engine (`AutoRemove`); then this waits for that removal to finish,
   * so `destroy()` never resolves while the container still exists.
   */
  private async removeContainer(name: string): Promise<void> {
    await removeContainerAndWait(this.engine.docker.getContainer(name))
  }

  /** Reaches a detached sandbox of this engine again (detached-connect.ts). */
  async connect(request: SandboxBackendConnectRequest): Promise<ConnectedBackendSandbox> {
    return connectDetached(request, {
      docker: this.engine.docker,
      engineSocketPath: this.engine.socketPath,
      engineDescription: this.engine.description,
      config: this.config,
      definition: this.definition,
      layout: this.context.layout,
      emit: this.context.emit,
      gateway: () => this.gateway(),
      brokeredCredentials: this.context.brokeredCredentials,
      runtime: () => this.runtime(),
      ownerLabels: { ...this.config.labels, ...ownerLabels(this.context.providerId) },
    })
  }

  async list(options: { readonly signal?: AbortSignal }): Promise<readonly SandboxListing[]> {
    return listSandboxes(this.engine.docker, this.context.providerId, options.signal).catch(
      (error: unknown) => {
        throw translateEngineError(error, this.name, this.engine.description, 'list')
      },
    )
  }

  async close(): Promise<void> {
    this.events.close()
    await this.deadOwnerSweep.stop()
    await this.egressGateway?.close()
  }
}
