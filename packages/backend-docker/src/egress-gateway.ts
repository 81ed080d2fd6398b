import { randomUUID } from 'node:crypto'
import { createInterface } from 'node:readline'
import type { Duplex } from 'node:stream'
import { type MuxStream, pipeBothWays } from '@cordon/agent/protocol'
import type { StdioChannel } from '@cordon/agent/sandbox'
import {
  type BrokeredCredential,
  type EgressPolicy,
  type EgressReasonCode,
  isSandboxId,
  SandboxOperationError,
} from '@cordon/core'
import {
  LABEL,
  ownerLabels,
  type ResourceRole,
  type SandboxBackendContext,
} from '@cordon/core/backend'
import {
  GATEWAY_SETTINGS_ENV,
  type GatewayAck,
  type GatewayCommand,
  type GatewaySettings,
} from '@cordon/egress'
import type Docker from 'dockerode'
import { type AgentRuntime, RUNTIME_MOUNT } from './agent-runtime.js'
import { attachChannel } from './attached-channel.js'
import { hardenedHostConfig } from './container-hardening.js'
import { removeContainerAndWait } from './container-removal.js'
import { watchHostAddresses } from './host-addresses.js'

type ProxiedPolicy = Exclude<EgressPolicy, { kind: 'deny-all' } | { kind: 'resolver' }>
/** What a sandbox was registered with, kept to register it again with a new gateway. */
interface Registration {
  policy: ProxiedPolicy
  readonly credentials: readonly BrokeredCredential[]
}
type GatewayCommandBody = GatewayCommand extends infer C
  ? C extends unknown
    ? Omit<C, 'id'>
    : never
  : never

/** How long an unused gateway stays up before it is removed (a new sandbox would otherwise pay its start). */
const DEFAULT_IDLE_MS = 2000
/** The unprivileged user the gateway's Node runs as. */
const GATEWAY_USER = '65534:65534'
/**
 * The gateway's Node process: its heap plus a buffer per open tunnel, for
 * every sandbox of the provider (up to 4096 tunnels in all).
 */
export const GATEWAY_MEMORY_MB = 256
/** Node's threads plus the init, with room to spare; the gateway starts no processes. */
export const GATEWAY_PIDS_LIMIT = 128

/**
 * How long a control command may wait for the gateway's answer before the
 * gateway counts as failed. Generous: a gateway tearing down hundreds of
 * tunnels on a loaded two-core host was seen to take over 10 s to answer.
 */
const CONTROL_ANSWER_TIMEOUT_MS = 30_000

/**
 * One egress gateway per provider: a container running `@cordon/egress`'s
 * gateway program (from the agent runtime volume) on the engine's default
 * bridge network. It listens on no port at all (its clients arrive over its
 * channel), so other containers on that bridge have nothing to connect to,
 * and every address it dials is screened (the bridge's own private range
 * included). A network of its own would be one more thing a host that dies
 * leaves behind. Like a sandbox, its only channel is
 * its attached stdin and stdout with the stream multiplexer: a `control`
 * stream for registrations and decision events, and one `client` stream per
 * sandbox connection. A sandbox's connections to its loopback proxy port
 * reach the host as `egress` streams from its agent, and the host joins each
 * to a `client` stream named for that sandbox, so the gateway knows a
 * connection's sandbox from the path it took, not from anything the sandbox
 * says. Sandboxes have no network interface at all, under runc and gVisor
 * alike. Started on first use, removed when its last sandbox goes.
 *
 * A gateway that dies while sandboxes still use it is started again on the
 * next connection or registration, and every live sandbox is registered with
 * the new one under its current policy, so none is left without egress.
 *
 * With a local engine this machine is the Docker host, and its addresses
 * (public ones included) are handed to the gateway's screen at start and
 * again whenever they change; if they cannot be delivered the gateway is
 * closed rather than left screening with a stale list.
 */
export class EgressGateway {
  private starting: Promise<void> | undefined
  private channel: StdioChannel | undefined
  private control: MuxStream | undefined
  private readonly pending = new Map<string, (ack: GatewayAck) => void>()
  private readonly clients = new Map<string, Registration>()
  private stopWatchingHost: (() => void) | undefined
  /** The provider closed: no gateway is started again. */
  private closed = false
  /** A gateway ran before: its container may still be on its way out. */
  private started = false
  private idleTimer: ReturnType<typeof setTimeout> | undefined
  private stopping: Promise<void> | undefined

  readonly names: { readonly container: string }

  constructor(
    private readonly docker: Docker,
    private readonly options: {
      readonly image: string
      readonly runtime: () => Promise<AgentRuntime>
      readonly hosts: Readonly<Record<string, string>>
      readonly allowedPorts: readonly number[] | undefined
      readonly upstreamCa: string | undefined
      readonly context: SandboxBackendContext
      readonly extraLabels: Readonly<Record<string, string>>
      readonly idleMs?: number
      /**
       * The Docker host's addresses, when this machine is it (a local
       * engine); `undefined` for a remote engine, whose addresses this host
       * cannot know (a limit the README states).
       */
      readonly hostAddresses: (() => readonly string[]) | undefined
    },
  ) {
    const id = options.context.providerId
    this.names = { container: `cordon-gateway-${id}` }
  }

  /** Registers a sandbox with its policy and credentials. */
  async addClient(
    sandboxId: string,
    policy: ProxiedPolicy,
    credentials: readonly BrokeredCredential[],
  ): Promise<void> {
    this.clients.set(sandboxId, { policy, credentials })
    if (this.idleTimer) clearTimeout(this.idleTimer)
    const running = this.starting !== undefined
    await this.ensureStarted()
    // A gateway this call started registered every client, this one included.
    if (!running) return
    await this.register({
      op: 'add',
      clientId: sandboxId,
      policy,
      ...(credentials.length ? { brokeredCredentials: [...credentials] } : {}),
    })
  }

  /** Whether a sandbox is registered here now. */
  has(sandboxId: string): boolean {
    return this.clients.has(sandboxId)
  }

  /** Replaces a sandbox's allowlist; its credentials stay as they are. */
  async setPolicy(sandboxId: string, policy: ProxiedPolicy): Promise<void> {
    const registration = this.clients.get(sandboxId)
    if (registration) registration.policy = policy
    await this.register({ op: 'set', clientId: sandboxId, policy })
  }

  /**
   * Sends a registration (an `add` or a `set`, already recorded in
   * `clients`). A gateway that was killed can still look alive for a moment:
   * the engine reports the container gone before its attach stream ends
   * (under gVisor, noticeably later). A registration sent into that window
   * is answered by the stream's end, not by the gateway; it then goes to a
   * new gateway, which registers every client under its current policy,
   * this one included. A gateway that is alive and refuses it, or does not
   * answer, fails the call.
   */
  private async register(body: GatewayCommandBody): Promise<void> {
    const channel = this.channel
    try {
      await this.send(body)
    } catch (error) {
      const gatewayGone = !channel || channel.isClosed || this.channel !== channel
      if (!gatewayGone || this.closed) throw error
      await this.ensureStarted()
    }
  }

  /** Joins a connection the sandbox made to the gateway, as that sandbox's. */
  connect(sandboxId: string, connection: Duplex): void {
    if (!this.clients.has(sandboxId) || this.closed) {
      connection.destroy()
      return
    }
    const channel = this.channel
    if (channel && !channel.isClosed) {
      pipeBothWays(connection, channel.open({ kind: 'client', clientId: sandboxId }))
      return
    }
    // The gateway died under its sandboxes: a new one takes them all back.
    this.ensureStarted().then(
      () => this.connect(sandboxId, connection),
      () => connection.destroy(),
    )
  }

  /** Forgets a sandbox; the gateway goes away once it has served its last one. */
  async removeClient(sandboxId: string): Promise<void> {
    if (!this.clients.delete(sandboxId)) return
    if (this.control) await this.send({ op: 'remove', clientId: sandboxId }).catch(() => {})
    if (this.clients.size === 0) {
      this.idleTimer = setTimeout(() => {
        if (this.clients.size === 0) void this.stop().catch(() => {})
      }, this.options.idleMs ?? DEFAULT_IDLE_MS)
      this.idleTimer.unref()
    }
  }

  /** Starts the gateway container if it is not running. */
  async ensureStarted(): Promise<void> {
    if (this.stopping) await this.stopping
    this.starting ??= this.start().catch(async (error: unknown) => {
      this.starting = undefined
      await this.removeResources().catch(() => {})
      throw error
    })
    return this.starting
  }

  private labels(role: ResourceRole): Record<string, string> {
    return {
      ...this.options.extraLabels,
      ...ownerLabels(this.options.context.providerId),
      [LABEL.role]: role,
    }
  }

  private async start(): Promise<void> {
    const { docker } = this
    const runtime = await this.options.runtime()
    // The container of a gateway that died may still be being removed, and
    // holds the name until it is gone.
    if (this.started) await this.removeResources()
    this.started = true
    const hostAddresses = this.options.hostAddresses?.()
    const settings: GatewaySettings = {
      ...(hostAddresses ? { hostAddresses: [...hostAddresses] } : {}),
      allowInwardFor: [...this.options.context.allowInwardFor],
      ...(this.options.allowedPorts ? { allowedPorts: [...this.options.allowedPorts] } : {}),
      ...(this.options.upstreamCa ? { upstreamCa: this.options.upstreamCa } : {}),
    }
    const container = await docker.createContainer({
      name: this.names.container,
      Image: this.options.image,
      Entrypoint: runtime.node(runtime.gatewayScript),
      Cmd: [],
      User: GATEWAY_USER,
      WorkingDir: '/',
      Env: [`${GATEWAY_SETTINGS_ENV}=${JSON.stringify(settings)}`],
      Labels: this.labels('gateway'),
      AttachStdin: true,
      AttachStdout: true,
      AttachStderr: true,
      OpenStdin: true,
      StdinOnce: true,
      Tty: false,
      HostConfig: hardenedHostConfig({
        networkMode: 'bridge',
        memoryBytes: GATEWAY_MEMORY_MB * 1024 * 1024,
        pidsLimit: GATEWAY_PIDS_LIMIT,
        mounts: [{ Type: 'volume', Source: runtime.volume, Target: RUNTIME_MOUNT, ReadOnly: true }],
        extra: {
          Tmpfs: { '/tmp': 'rw,nosuid,nodev,noexec,size=16m,mode=1777' },
          ExtraHosts: Object.entries(this.options.hosts).map(
            ([name, address]) => `${name}:${address}`,
          ),
        },
      }),
    })
    const channel = await attachChannel(container, docker)
    this.channel = channel
    channel.onClose(() => this.onGatewayGone(channel))
    await container.start()
    const control = channel.open({ kind: 'control' })
    control.on('error', () => {})
    this.control = control
    const ready = new Promise<void>((resolve, reject) => {
      const lines = createInterface({ input: control, crlfDelay: Number.POSITIVE_INFINITY })
      // readline re-emits the stream's errors; the channel's end is handled by onClose.
      lines.on('error', () => {})
      lines.on('line', (text) => {
        let line: { type?: string } & Record<string, unknown>
        try {
          line = JSON.parse(text)
        } catch {
          return
        }
        if (line.type === 'ready') resolve()
        else this.handle(line)
      })
      channel.onClose(() =>
        reject(
          new SandboxOperationError(
            'egress gateway',
            `the gateway exited: ${channel.log.trim() || 'no output'}`,
          ),
        ),
      )
    })
    await ready
    if (hostAddresses && this.options.hostAddresses) {
      const read = this.options.hostAddresses
      this.stopWatchingHost = watchHostAddresses(read, hostAddresses, (addresses) => {
        this.send({ op: 'host-addresses', addresses: [...addresses] }).catch(() => {
          // A gateway that cannot take the host's new addresses would let
          // them through: it goes, and the next connection starts a new one.
          if (this.channel === channel) channel.close()
        })
      })
    }
    // Sandboxes that outlived an earlier gateway (and any registered while
    // this one started) are registered here with their current policies.
    await Promise.all(
      [...this.clients].map(([clientId, { policy, credentials }]) =>
        this.send({
          op: 'add',
          clientId,
          policy,
          ...(credentials.length ? { brokeredCredentials: [...credentials] } : {}),
        }),
      ),
    )
  }

  private handle(line: { type?: string } & Record<string, unknown>): void {
    if (line.type === 'ack') {
      const ack = line as unknown as GatewayAck
      this.pending.get(ack.id)?.(ack)
      this.pending.delete(ack.id)
      return
    }
    if (line.type === 'egress') {
      const clientId = typeof line.clientId === 'string' ? line.clientId : undefined
      this.options.context.emit({
        type: 'egress',
        ...(clientId && isSandboxId(clientId) ? { sandboxId: clientId } : {}),
        timestamp: typeof line.timestamp === 'number' ? line.timestamp : Date.now(),
        kind: line.kind === 'connect' ? 'connect' : 'http',
        host: String(line.host ?? ''),
        port: Number(line.port ?? 0),
        decision: line.decision === 'allow' ? 'allow' : 'deny',
        reason: line.reason as EgressReasonCode,
        ...(typeof line.address === 'string' ? { address: line.address } : {}),
        bytesUp: Number(line.bytesUp ?? 0),
        bytesDown: Number(line.bytesDown ?? 0),
        durationMs: Number(line.durationMs ?? 0),
      })
    }
  }

  private send(body: GatewayCommandBody): Promise<GatewayAck> {
    const control = this.control
    if (!control || control.writableEnded || control.destroyed)
      return Promise.reject(
        new SandboxOperationError('egress gateway', 'the gateway is not running'),
      )
    const id = randomUUID()
    return new Promise<GatewayAck>((resolve, reject) => {
      const timer = setTimeout(() => {
        this.pending.delete(id)
        reject(
          new SandboxOperationError(
            'egress gateway',
            `no answer to "${body.op}" within ${CONTROL_ANSWER_TIMEOUT_MS / 1000} s`,
          ),
        )
      }, CONTROL_ANSWER_TIMEOUT_MS)
      this.pending.set(id, (ack) => {
        clearTimeout(timer)
        if (ack.ok) resolve(ack)
        else reject(new SandboxOperationError('egress gateway', ack.error ?? `"${body.op}" failed`))
      })
      control.write(`${JSON.stringify({ id, ...body })}\n`)
    })
  }

  private onGatewayGone(channel: StdioChannel): void {
    if (this.channel !== channel) return
    for (const [id, settle] of this.pending)
      settle({ type: 'ack', id, ok: false, error: 'the gateway exited' })
    this.pending.clear()
    this.stopWatchingHost?.()
    this.stopWatchingHost = undefined
    this.channel = undefined
    this.control = undefined
    this.starting = undefined
  }

  /** Removes the gateway for good: the provider is closing. */
  close(): Promise<void> {
    this.closed = true
    return this.stop()
  }

  /** Removes the gateway. */
  stop(): Promise<void> {
    this.stopping ??= (async () => {
      if (this.idleTimer) clearTimeout(this.idleTimer)
      this.starting = undefined
      const channel = this.channel
      channel?.close()
      await this.removeResources()
      if (channel) this.onGatewayGone(channel)
    })().finally(() => {
      this.stopping = undefined
    })
    return this.stopping
  }

  /** Removes the gateway's container and waits until the engine no longer has it. */
  private async removeResources(): Promise<void> {
    await removeContainerAndWait(this.docker.getContainer(this.names.container))
  }
}
