import { randomUUID } from 'node:crypto'
import { type Duplex, PassThrough } from 'node:stream'
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
import { serviceHostConfig } from './container-spec.js'
import {
  createRelay,
  EGRESS_SOCKET_DIR,
  type RelayHandle,
  relayContainerName,
} from './egress-relay.js'
import { isNotFound } from './engine-errors.js'

type ProxiedPolicy = Exclude<EgressPolicy, { kind: 'deny-all' } | { kind: 'resolver' }>
type GatewayCommandBody = GatewayCommand extends infer C
  ? C extends unknown
    ? Omit<C, 'id'>
    : never
  : never

/** How long an unused gateway stays up before it is removed (a new sandbox would otherwise pay its start). */
const DEFAULT_IDLE_MS = 2000
/** Started relays kept ready for the next sandbox behind the gateway. */
const SPARE_RELAYS = 1

/**
 * One egress gateway per provider: a container running `@cordon/egress`'s
 * gateway program on a network of its own (bridge, inter-container traffic
 * off), holding one unix socket per sandbox in a volume shared only with the
 * sandboxes' relays. It is driven over its attached stdin/stdout (JSON
 * lines), so the host needs no network path to it and a sandbox has none.
 * Decision events come back on the same stream and go to the provider's
 * event hook. Started on first use, removed when its last sandbox goes.
 */
export class EgressGateway {
  private starting: Promise<void> | undefined
  private container: Docker.Container | undefined
  private stdin: Duplex | undefined
  private readonly pending = new Map<string, (ack: GatewayAck) => void>()
  private readonly clients = new Set<string>()
  private idleTimer: ReturnType<typeof setTimeout> | undefined
  private readonly spareRelays: RelayHandle[] = []
  private refilling: Promise<void> | undefined
  private stopping: Promise<void> | undefined

  readonly names: { readonly container: string; readonly network: string; readonly volume: string }

  constructor(
    private readonly docker: Docker,
    private readonly options: {
      readonly image: string
      readonly hosts: Readonly<Record<string, string>>
      readonly allowedPorts: readonly number[] | undefined
      readonly upstreamCa: string | undefined
      readonly context: SandboxBackendContext
      readonly extraLabels: Readonly<Record<string, string>>
      readonly idleMs?: number
    },
  ) {
    const id = options.context.providerId
    this.names = {
      container: `cordon-gateway-${id}`,
      network: `cordon-egress-${id}`,
      volume: `cordon-egress-${id}`,
    }
  }

  /** The volume holding the per-sandbox sockets, mounted read-only into relays. */
  get volumeName(): string {
    return this.names.volume
  }

  /** Registers a sandbox; returns the path of its socket inside the sockets volume. */
  /**
   * Hands out a started relay whose loopback-only namespace a new sandbox
   * joins. One spare is kept ready (made in the background after each take),
   * so a sandbox behind the gateway does not wait for a relay's container and
   * Node start-up; when none is spare, one is made on the spot.
   */
  async takeRelay(signal?: AbortSignal): Promise<RelayHandle> {
    await this.ensureStarted()
    const spare = this.spareRelays.shift()
    this.refillRelays()
    if (spare) return spare
    const relay = await this.makeRelay(signal)
    await relay.start()
    return relay
  }

  private refillRelays(): void {
    if (this.refilling || this.spareRelays.length >= SPARE_RELAYS) return
    this.refilling = (async () => {
      try {
        while (this.spareRelays.length < SPARE_RELAYS && this.container && !this.stopping) {
          const relay = await this.makeRelay()
          try {
            await relay.start()
            await relay.ready
          } catch (error) {
            await this.removeRelay(relay.relayId).catch(() => {})
            throw error
          }
          if (this.stopping || !this.container) {
            await this.removeRelay(relay.relayId).catch(() => {})
            return
          }
          this.spareRelays.push(relay)
        }
      } catch {
        // A spare is an optimisation; the next take makes its relay on the spot.
      } finally {
        this.refilling = undefined
      }
    })()
  }

  private makeRelay(signal?: AbortSignal): Promise<RelayHandle> {
    const relayId = `r${randomUUID().replaceAll('-', '').slice(0, 24)}`
    return createRelay({
      docker: this.docker,
      image: this.options.image,
      relayId,
      socketPath: `${EGRESS_SOCKET_DIR}/${relayId}.sock`,
      volumeName: this.names.volume,
      labels: this.labels('relay'),
      ...(signal ? { signal } : {}),
    })
  }

  /** Removes a relay's container; tolerates one already gone. */
  async removeRelay(relayId: string): Promise<void> {
    try {
      await this.docker.getContainer(relayContainerName(relayId)).remove({ force: true })
    } catch (error) {
      if (!isNotFound(error)) throw error
    }
  }

  /** Registers a sandbox on the socket of the relay it joined. */
  async addClient(
    sandboxId: string,
    relayId: string,
    policy: ProxiedPolicy,
    credentials: readonly BrokeredCredential[],
  ): Promise<string> {
    this.clients.add(sandboxId)
    if (this.idleTimer) clearTimeout(this.idleTimer)
    await this.ensureStarted()
    const ack = await this.send({
      op: 'add',
      clientId: sandboxId,
      socketName: relayId,
      policy,
      ...(credentials.length ? { brokeredCredentials: [...credentials] } : {}),
    })
    if (!ack.socketPath)
      throw new SandboxOperationError('egress gateway', 'registration returned no socket')
    return ack.socketPath
  }

  async setPolicy(sandboxId: string, policy: ProxiedPolicy): Promise<void> {
    await this.send({ op: 'set', clientId: sandboxId, policy })
  }

  /** Forgets a sandbox; the gateway goes away once it has served its last one. */
  async removeClient(sandboxId: string): Promise<void> {
    if (!this.clients.delete(sandboxId)) return
    if (this.container) await this.send({ op: 'remove', clientId: sandboxId }).catch(() => {})
    if (this.clients.size === 0) {
      this.idleTimer = setTimeout(() => {
        if (this.clients.size === 0) void this.stop().catch(() => {})
      }, this.options.idleMs ?? DEFAULT_IDLE_MS)
      this.idleTimer.unref()
    }
  }

  /** Starts the gateway (its network, sockets volume and container) if it is not running. */
  async ensureStarted(): Promise<void> {
    if (this.stopping) await this.stopping
    await this.startOnce()
  }

  private startOnce(): Promise<void> {
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
    if (this.stopping) await this.stopping
    const { docker } = this
    await docker.createNetwork({
      Name: this.names.network,
      Driver: 'bridge',
      CheckDuplicate: true,
      Labels: this.labels('network'),
      // No container on this network may talk to another; only the gateway lives here anyway.
      Options: { 'com.docker.network.bridge.enable_icc': 'false' },
    })
    await docker.createVolume({
      Name: this.names.volume,
      Labels: this.labels('egress-sockets'),
      Driver: 'local',
      DriverOpts: { type: 'tmpfs', device: 'tmpfs', o: 'size=1m,uid=1000,gid=1000,mode=0755' },
    })
    const settings: GatewaySettings = {
      socketDir: EGRESS_SOCKET_DIR,
      allowInwardFor: [...this.options.context.allowInwardFor],
      ...(this.options.allowedPorts ? { allowedPorts: [...this.options.allowedPorts] } : {}),
      ...(this.options.upstreamCa ? { upstreamCa: this.options.upstreamCa } : {}),
    }
    const container = await docker.createContainer({
      name: this.names.container,
      Image: this.options.image,
      User: '1000:1000',
      Env: [`${GATEWAY_SETTINGS_ENV}=${JSON.stringify(settings)}`],
      Labels: this.labels('gateway'),
      AttachStdin: true,
      AttachStdout: true,
      AttachStderr: true,
      OpenStdin: true,
      StdinOnce: false,
      Tty: false,
      HostConfig: {
        ...serviceHostConfig({
          networkMode: this.names.network,
          memoryMb: 256,
          pidsLimit: 128,
          mounts: [
            {
              Type: 'volume',
              Source: this.names.volume,
              Target: EGRESS_SOCKET_DIR,
              ReadOnly: false,
            },
          ],
        }),
        ExtraHosts: Object.entries(this.options.hosts).map(
          ([name, address]) => `${name}:${address}`,
        ),
      },
    })
    this.container = container
    const stream = (await container.attach({
      stream: true,
      hijack: true,
      stdin: true,
      stdout: true,
      stderr: true,
    })) as Duplex
    this.stdin = stream
    const stdout = new PassThrough()
    const stderr = new PassThrough()
    docker.modem.demuxStream(stream, stdout, stderr)
    let stderrTail = ''
    stderr.on('data', (chunk: Buffer) => {
      stderrTail = (stderrTail + chunk.toString()).slice(-2000)
    })
    const ready = new Promise<void>((resolve, reject) => {
      this.readLines(stdout, (line) => {
        if (line.type === 'ready') resolve()
        else this.handle(line)
      })
      stream.on('end', () => {
        reject(
          new SandboxOperationError(
            'egress gateway',
            `the gateway exited: ${stderrTail.trim() || 'no output'}`,
          ),
        )
        this.onGatewayGone()
      })
    })
    ready.catch(() => {})
    await container.start()
    await ready
  }

  private readLines(
    stdout: PassThrough,
    onLine: (line: { type?: string } & Record<string, unknown>) => void,
  ): void {
    let buffered = ''
    stdout.on('data', (chunk: Buffer) => {
      buffered += chunk.toString('utf8')
      for (let newline = buffered.indexOf('\n'); newline >= 0; newline = buffered.indexOf('\n')) {
        const text = buffered.slice(0, newline)
        buffered = buffered.slice(newline + 1)
        try {
          onLine(JSON.parse(text))
        } catch {
          // Not a protocol line; the gateway writes diagnostics to stderr only.
        }
      }
    })
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
    const stdin = this.stdin
    if (!stdin || stdin.writableEnded)
      return Promise.reject(
        new SandboxOperationError('egress gateway', 'the gateway is not running'),
      )
    const id = randomUUID()
    return new Promise<GatewayAck>((resolve, reject) => {
      const timer = setTimeout(() => {
        this.pending.delete(id)
        reject(new SandboxOperationError('egress gateway', `no answer to "${body.op}" within 10 s`))
      }, 10_000)
      this.pending.set(id, (ack) => {
        clearTimeout(timer)
        if (ack.ok) resolve(ack)
        else reject(new SandboxOperationError('egress gateway', ack.error ?? `"${body.op}" failed`))
      })
      stdin.write(`${JSON.stringify({ id, ...body })}\n`)
    })
  }

  private onGatewayGone(): void {
    for (const [id, settle] of this.pending)
      settle({ type: 'ack', id, ok: false, error: 'the gateway exited' })
    this.pending.clear()
    this.stdin = undefined
    this.container = undefined
    this.starting = undefined
  }

  /** Removes the gateway, its network and its sockets volume. */
  stop(): Promise<void> {
    this.stopping ??= (async () => {
      if (this.idleTimer) clearTimeout(this.idleTimer)
      this.starting = undefined
      await this.refilling
      const spares = this.spareRelays.splice(0)
      await Promise.all(spares.map((relay) => this.removeRelay(relay.relayId).catch(() => {})))
      this.stdin?.end()
      await this.removeResources()
      this.onGatewayGone()
    })().finally(() => {
      this.stopping = undefined
    })
    return this.stopping
  }

  private async removeResources(): Promise<void> {
    const ignoreMissing = async (operation: () => Promise<unknown>) => {
      try {
        await operation()
      } catch (error) {
        if (!isNotFound(error)) throw error
      }
    }
    await ignoreMissing(() =>
      this.docker.getContainer(this.names.container).remove({ force: true }),
    )
    await ignoreMissing(() => this.docker.getNetwork(this.names.network).remove())
    await ignoreMissing(() => this.docker.getVolume(this.names.volume).remove({ force: true }))
  }
}
