import { Socket } from 'node:net'
import { Duplex } from 'node:stream'
import { AgentClient, AgentSandbox, refusedTheSecret, StdioChannel } from '@cordon/agent/sandbox'
import type { ContainerBackendConfig } from '@cordon/builtin-backends'
import type { ResolvedContainerSandboxLayout } from '@cordon/core'
import {
  type BrokeredCredential,
  egressPolicySchema,
  type SandboxBackendEnforcement,
  SandboxControlRefusedError,
  SandboxCredentialRefusedError,
  type SandboxEvent,
  type SandboxId,
  SandboxNotFoundError,
  SandboxTransportError,
} from '@cordon/core'
import {
  type ConnectedBackendSandbox,
  enforcedLayoutMounts,
  LABEL,
  type SandboxBackendConnectRequest,
  type SandboxListing,
  writableRoots,
} from '@cordon/core/backend'
import type Docker from 'dockerode'
import type { AgentRuntime } from './agent-runtime.js'
import { engineStreamCarrier, startAttachedRootExec } from './attached-channel.js'
import { DEFAULT_CPUS, proxyEnvironment, sandboxUser } from './container-spec.js'
import type { dockerBackend } from './definition.js'
import { type DetachedEgress, holdDetachedEgress } from './detached-egress.js'
import { explainDetachedLoss } from './detached-loss.js'
import {
  DIRECT_SOCKET_PATH,
  DirectSocket,
  HOST_SOCKETS_RUNTIME,
  hostCanDialHostSockets,
} from './direct-socket.js'
import { openDockerTerminal } from './docker-terminal.js'
import type { EgressGateway } from './egress-gateway.js'
import { isNotFound, translateEngineError } from './engine-errors.js'
import { pauseContainer, unpauseContainer } from './engine-freezer.js'
import { engineUsage } from './engine-usage.js'
import {
  baseImageOf,
  publicSnapshot,
  snapshotRoots,
  takeFilesystemSnapshot,
} from './filesystem-snapshot.js'
import { imageEnvironment } from './image-environment.js'
import { DETACHED_MEMORY_SNAPSHOT_REFUSAL } from './memory-snapshot.js'
import type { ProxiedPolicy } from './sandbox-egress.js'

/**
 * Detached sandboxes on the Docker Engine: what the creator hands the
 * provider to reach one again, and how another process does.
 *
 * A detached sandbox's agent does not end when its attach closes
 * (`CORDON_AGENT_DETACHED`); it listens on its direct socket (root's, mode
 * 0600, in a root-only tmpfs: the sandbox's user cannot reach it) until its
 * lifetime ends it. A host reaches that socket one of two ways:
 *
 * - runc on this machine's engine: straight through the container's root as
 *   the kernel shows it to the host (direct-socket.ts), past the engine;
 * - anywhere else (gVisor keeps the socket inside its own kernel; a remote
 *   engine's filesystem is not the host's), and for port forwards: a relay
 *   the host starts in the container with the engine's exec, as root, from
 *   the container's own runtime (`agent --relay`): one exec, carrying every
 *   stream over its stdio as the attach does.
 *
 * Either way the agent authenticates every connection with the secret the
 * creator held, so the credential is proved by the first connection.
 */

/** What the creator keeps for a connection (inside the host's credential, never on the engine). */
interface ReconnectState {
  readonly secret: string
  /** The create's `env`: every command's environment is laid over it, as the creator's. */
  readonly env: Readonly<Record<string, string>>
  readonly workingDirectory: string
  readonly memoryLimitMb: number
  readonly maxProcesses: number
  /**
   * The policy the creator registered at its gateway (a `resolver`'s answer
   * at create, as a static list); absent: `deny-all`. A host that connects
   * enforces it at its own gateway (detached-egress.ts).
   */
  readonly egress?: ProxiedPolicy
}

export function encodeReconnectState(state: ReconnectState): string {
  return JSON.stringify(state)
}

function decodeReconnectState(text: string, sandboxId: SandboxId): ReconnectState {
  try {
    const state = JSON.parse(text) as ReconnectState
    if (
      typeof state.secret === 'string' &&
      typeof state.workingDirectory === 'string' &&
      (state.egress === undefined || isProxiedPolicy(state.egress))
    )
      return state
  } catch {
    // Refused below.
  }
  throw new SandboxCredentialRefusedError(sandboxId, 'the credential holds no Docker sandbox state')
}

/** A policy a gateway enforces, as the creator kept it (checked as a create's policy is). */
function isProxiedPolicy(policy: unknown): policy is ProxiedPolicy {
  const parsed = egressPolicySchema.safeParse(policy)
  return parsed.success && (parsed.data.kind === 'static' || parsed.data.kind === 'allow-all')
}

/**
 * Tells a detached sandbox's agent to end (SIGTERM, which the container's
 * init and cordon-launcher pass on): it stops its commands and seals its
 * outputs as any end does, then exits; the engine removes the container.
 */
export async function stopAgent(docker: Docker, name: string): Promise<void> {
  await docker
    .getContainer(name)
    .kill({ signal: 'SIGTERM' })
    .catch(() => {})
}

export interface ConnectDependencies {
  readonly docker: Docker
  readonly engineSocketPath: string | undefined
  readonly engineDescription: string
  readonly config: ContainerBackendConfig
  readonly definition: typeof dockerBackend
  readonly layout: ResolvedContainerSandboxLayout | undefined
  readonly emit: (event: SandboxEvent) => void
  /** This provider's egress gateway (started on first use). */
  readonly gateway: () => EgressGateway
  /** This provider's brokered credentials: those a connected sandbox's egress carries. */
  readonly brokeredCredentials: readonly BrokeredCredential[]
  /** This provider's agent runtime: a snapshot's capture runs with its Node. */
  readonly runtime: () => Promise<AgentRuntime>
  /** The labels all this provider makes carries (a snapshot's image among them). */
  readonly ownerLabels: Readonly<Record<string, string>>
}

/**
 * The sandboxes on this engine a provider may reach, from their containers'
 * labels: every detached one (any process holding its credential may
 * connect) and the provider's own (`providerId`).
 */
export async function listSandboxes(
  docker: Docker,
  providerId: string,
  signal: AbortSignal | undefined,
): Promise<SandboxListing[]> {
  const containers = await docker.listContainers({
    all: true,
    filters: { label: [`${LABEL.managed}=1`, `${LABEL.role}=sandbox`] },
    ...(signal ? { abortSignal: signal } : {}),
  })
  return containers.flatMap((info) => {
    const labels = info.Labels ?? {}
    const id = labels[LABEL.sandbox]
    const reachable = labels[LABEL.detached] === '1' || labels[LABEL.provider] === providerId
    if (!id || !reachable) return []
    const expires = Number(labels[LABEL.expires])
    return [
      {
        id: id as SandboxId,
        status:
          info.State === 'running' ? 'running' : info.State === 'paused' ? 'paused' : 'ending',
        labels,
        createdAt: info.Created * 1000,
        endsAt: Number.isFinite(expires) && expires > 0 ? expires : undefined,
        detached: labels[LABEL.detached] === '1',
      } satisfies SandboxListing,
    ]
  })
}

/**
 * Connects to detached sandbox `request.sandboxId`: finds its container,
 * checks it is a detached sandbox of this backend's runtime that still
 * runs, and resolves once its agent has accepted the secret.
 */
export async function connectDetached(
  request: SandboxBackendConnectRequest,
  deps: ConnectDependencies,
): Promise<ConnectedBackendSandbox> {
  const { docker, definition } = deps
  const backend = definition.name
  const id = request.sandboxId
  const layout = deps.layout
  const name = `cordon-${id}`
  const state = decodeReconnectState(request.secret, id)
  const info = await docker
    .getContainer(name)
    .inspect(request.signal ? { abortSignal: request.signal } : {})
    .catch((error: unknown) => {
      if (isNotFound(error)) return undefined
      throw translateEngineError(error, backend, deps.engineDescription, 'connect')
    })
  const labels = info?.Config?.Labels ?? {}
  if (!info || labels[LABEL.sandbox] !== id || labels[LABEL.managed] !== '1')
    throw new SandboxNotFoundError(
      id,
      `the engine at ${deps.engineDescription} has no container ${name}`,
    )
  if (labels[LABEL.detached] !== '1')
    throw new SandboxNotFoundError(id, 'it was not created detached: it ends with its creator')
  // gVisor with the host-backed socket runs under a runtime of its own (direct-socket.ts).
  const engineRuntime = info.HostConfig?.Runtime ?? 'runc'
  const runtime = engineRuntime === HOST_SOCKETS_RUNTIME ? 'runsc' : engineRuntime
  const wanted = deps.config.runtime === 'runsc' ? 'runsc' : 'runc'
  if (runtime !== wanted)
    throw new SandboxNotFoundError(
      id,
      `it runs under ${runtime}, and this provider's backend is ${backend}; connect with a provider of that runtime`,
    )
  if (!info.State?.Running)
    throw new SandboxNotFoundError(id, 'it has ended (its lifetime ran out, or it was destroyed)')
  const expires = Number(labels[LABEL.expires])
  const endsAt = Number.isFinite(expires) && expires > 0 ? expires : Date.now()
  if (!layout) throw new SandboxNotFoundError(id, 'this provider has no layout')
  // A sandbox a host paused answers nothing: connecting continues it (and its clocks, below).
  if (info.State.Paused) await unpauseContainer(docker.getContainer(info.Id))

  const relay = new RelayChannel(docker, info)
  // Under gVisor, its host-backed socket where it has one; else the relay (one engine exec).
  const direct =
    engineRuntime === HOST_SOCKETS_RUNTIME && hostCanDialHostSockets(deps.engineSocketPath)
      ? await DirectSocket.findOnHost(docker, info.Id)
      : deps.engineSocketPath !== undefined && runtime !== 'runsc'
        ? await DirectSocket.find(docker, info.Id)
        : undefined
  let directWorks = direct !== undefined
  let directProved = false
  const client = new AgentClient({
    secret: state.secret,
    description: `container ${name}`,
    dial: async (signal, kind) => {
      if (directWorks && direct) {
        try {
          const stream = await direct.connect(signal)
          directProved = true
          return stream
        } catch (error) {
          if (directProved) throw error
          directWorks = false
        }
      }
      return (await relay.channel()).open({ kind })
    },
    // Under gVisor, uploads hand the agent pieces as files beside its host-backed socket.
    uploadStage: () => direct?.stage,
    onSpare: (stream, spare) => {
      if (stream instanceof Socket) {
        if (spare) stream.unref()
        else stream.ref()
      } else relay.setSpare(stream, spare)
    },
  })
  let egress: DetachedEgress | undefined
  const close = async (): Promise<void> => {
    client.close()
    direct?.close()
    relay.close()
    await egress?.close()
  }
  try {
    await client.openSpareConnection(request.signal ?? new AbortController().signal)
    // A pause held the agent's deadlines (its lifetime among them): they run again now.
    if (info.State.Paused) await client.clocks('resume-clocks', request.signal)
    // Proved the secret first: only then is the sandbox registered at this provider's gateway.
    if (state.egress)
      egress = await holdDetachedEgress({
        docker,
        containerId: info.Id,
        sandboxId: id,
        backend,
        entrypoint: entrypointOf(info),
        policy: state.egress,
        gateway: deps.gateway(),
        brokeredCredentials: deps.brokeredCredentials,
        client,
        dialDirect: directWorks && direct ? (signal) => direct.connect(signal) : undefined,
        signal: request.signal,
      })
  } catch (error) {
    await close()
    if (refusedTheSecret(error))
      throw new SandboxCredentialRefusedError(id, "the sandbox's agent refused the credential", {
        cause: error,
      })
    throw error
  }

  const user = sandboxUser(deps.config, id)
  const imageEnv = await imageEnvironment(docker, deps.config.image).catch(() => ({}))
  const sandboxEnv = {
    HOME: '/tmp',
    ...imageEnv,
    ...state.env,
    ...(state.egress ? proxyEnvironment() : {}),
  }
  const launcher = launcherOf(info)
  const enforcement: SandboxBackendEnforcement = {
    backend,
    isolation: definition.enforcement.isolation,
    runtime: wanted,
    egress: state.egress ?? { kind: 'deny-all' },
    limits: {
      memoryLimitMb: state.memoryLimitMb,
      maxProcesses: state.maxProcesses,
      cpus: deps.config.cpus ?? DEFAULT_CPUS,
    },
    user,
    mounts: [
      ...enforcedLayoutMounts(layout),
      { path: '/tmp', access: 'read-write', noexec: deps.config.tmpfsNoexec === true },
    ],
  }
  const sandbox: AgentSandbox = new AgentSandbox({
    id,
    rootDir: layout.outputs.containerPath,
    writeRoots: writableRoots(layout),
    connectPort: (port) =>
      new DeferredStream(
        relay.channel().then((channel) => channel.open({ kind: 'connect', port })),
      ),
    measureUsage: (usageSignal) => engineUsage(docker, info.Id, usageSignal),
    env: sandboxEnv,
    openTerminal: (terminalOptions) =>
      openDockerTerminal(
        {
          docker,
          containerId: info.Id,
          sandboxId: id,
          user,
          env: sandboxEnv,
          workingDirectory: state.workingDirectory,
          agent: client,
          launcher,
          backend,
          gvisor: wanted === 'runsc',
        },
        terminalOptions,
      ).catch((error: unknown) => {
        throw translateEngineError(error, backend, deps.engineDescription, 'openTerminal')
      }),
    workingDirectory: state.workingDirectory,
    watchesExternalChanges: wanted !== 'runsc',
    execTimeoutMs: request.execTimeoutMs,
    client,
    backend,
    environment: definition.enforcement.environment,
    enforcement,
    emit: deps.emit,
    reconnectSecret: request.secret,
    disconnect: async () => close(),
    release: async () => {
      await close()
      await stopAgent(docker, info.Id)
      await docker
        .getContainer(info.Id)
        .remove({ force: true, v: true })
        .catch((error: unknown) => {
          if (!isNotFound(error) && !/removal .* in progress/i.test(String(error))) throw error
        })
    },
    explainLoss: () =>
      explainDetachedLoss(async () => {
        const now = await docker
          .getContainer(info.Id)
          .inspect()
          .catch(() => undefined)
        return now?.State?.Running
      }, endsAt),
    freezer: {
      pause: (signal) => pauseContainer(docker.getContainer(info.Id), signal),
      resume: (signal) => unpauseContainer(docker.getContainer(info.Id), signal),
    },
    // Its files, as the process that made it would take them; its processes never
    // (memory-snapshot.ts: a detached sandbox is not checkpointed).
    snapshot: async (snapshotOptions) => {
      if (snapshotOptions.memory) {
        throw new SandboxControlRefusedError(
          'snapshot.memory',
          backend,
          DETACHED_MEMORY_SNAPSHOT_REFUSAL,
        )
      }
      const taken = await Promise.all([deps.runtime(), baseImageOf(docker, info)])
        .then(([agentRuntime, baseImage]) =>
          takeFilesystemSnapshot({
            docker,
            backend,
            containerId: info.Id,
            sandboxId: id,
            runtime: agentRuntime,
            agent: client,
            user,
            roots: snapshotRoots(layout),
            baseImage,
            enforcement,
            ownerLabels: deps.ownerLabels,
            signal: snapshotOptions.signal,
          }),
        )
        .catch((error: unknown) => {
          throw translateEngineError(error, backend, deps.engineDescription, 'snapshot')
        })
      return publicSnapshot(taken)
    },
  })
  return { sandbox, endsAt }
}

/** cordon-launcher as the container's entry names it (`<launcher> --agent ...`), if it has one. */
function launcherOf(info: Docker.ContainerInspectInfo): string | undefined {
  const entry = entrypointOf(info)
  return entry[1] === '--agent' ? entry[0] : undefined
}

function entrypointOf(info: Docker.ContainerInspectInfo): string[] {
  const entry = info.Config?.Entrypoint
  return Array.isArray(entry) ? entry : typeof entry === 'string' ? [entry] : []
}

/**
 * The relay (`agent --relay`) in a detached sandbox, started on first use
 * with the engine's exec from the container's own runtime (its Node and
 * agent: the relay speaks the same protocol version as the agent), as root.
 */
class RelayChannel {
  private started: Promise<StdioChannel> | undefined
  private current: StdioChannel | undefined
  private closed = false

  constructor(
    private readonly docker: Docker,
    private readonly info: Docker.ContainerInspectInfo,
  ) {}

  channel(): Promise<StdioChannel> {
    if (this.closed)
      return Promise.reject(new SandboxTransportError('disconnected from the sandbox'))
    this.started ??= this.start().catch((error: unknown) => {
      this.started = undefined
      throw error
    })
    return this.started
  }

  setSpare(stream: object, spare: boolean): void {
    this.current?.setSpare(stream, spare)
  }

  close(): void {
    this.closed = true
    this.current?.close()
  }

  private async start(): Promise<StdioChannel> {
    const entry = entrypointOf(this.info)
    const program = entry[1] === '--agent' ? entry.slice(2) : entry
    const { socket, demuxed } = await startAttachedRootExec(this.docker, this.info.Id, [
      ...program,
      '--relay',
      DIRECT_SOCKET_PATH,
    ])
    const channel = new StdioChannel(engineStreamCarrier(socket, demuxed))
    channel.onClose(() => {
      // A later stream starts another relay; the agent and the sandbox do not depend on this one.
      if (this.current === channel) {
        this.current = undefined
        this.started = undefined
      }
    })
    if (this.closed) channel.close()
    this.current = channel
    return channel
  }
}

/** A stream whose far end is still being opened (a port forward waiting for the relay to start). */
class DeferredStream extends Duplex {
  private target: Duplex | undefined
  private readonly waiting: Array<{ chunk: Buffer; done: (error?: Error | null) => void }> = []
  private ended = false

  constructor(opening: Promise<Duplex>) {
    super({ allowHalfOpen: true })
    opening.then(
      (target) => {
        if (this.destroyed) {
          target.destroy()
          return
        }
        this.target = target
        target.on('data', (chunk: Buffer) => {
          if (!this.push(chunk)) target.pause()
        })
        target.on('end', () => this.push(null))
        target.on('error', (error: Error) => this.destroy(error))
        target.on('close', () => this.destroy())
        for (const { chunk, done } of this.waiting.splice(0)) target.write(chunk, done)
        if (this.ended) target.end()
      },
      (error: Error) => this.destroy(error),
    )
  }

  override _read(): void {
    this.target?.resume()
  }

  override _write(chunk: Buffer, _encoding: BufferEncoding, done: (error?: Error | null) => void) {
    if (this.target) this.target.write(chunk, done)
    else this.waiting.push({ chunk, done })
  }

  override _final(done: (error?: Error | null) => void): void {
    if (this.target) this.target.end()
    else this.ended = true
    done()
  }

  override _destroy(error: Error | null, done: (error?: Error | null) => void): void {
    this.target?.destroy()
    done(error)
  }
}
