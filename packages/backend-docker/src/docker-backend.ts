import {
  type ContainerBackendConfig,
  type CordonSandbox,
  type SandboxBackendOptions,
  SandboxControlRefusedError,
  SandboxCreateTimeoutError,
  SandboxReadinessError,
} from '@cordon/core'
import {
  type CordonSandboxBackend,
  egressRefusal,
  LABEL,
  ownerLabels,
  type ResourceRole,
  resolveBackendOptions,
  type SandboxBackendContext,
  type SandboxCreateRequest,
  withDeadline,
} from '@cordon/core/backend'
import type Docker from 'dockerode'
import {
  containerSpec,
  DEFAULT_USER,
  layoutMounts,
  type WorkspaceVolume,
  workspaceVolumes,
} from './container-spec.js'
import { DockerSandbox } from './docker-sandbox.js'
import { EgressGateway } from './egress-gateway.js'
import { RELAY_PORT, type RelayHandle, relayContainerName } from './egress-relay.js'
import { connectEngine, type EngineConnection } from './engine-connection.js'
import { isNotFound, translateEngineError } from './engine-errors.js'
import { EngineEvents } from './engine-events.js'
import { SandboxEgress } from './sandbox-egress.js'

export const DEFAULT_READINESS_TIMEOUT_MS = 30_000

/** Both spellings, because tools disagree on which one they read. */
function proxyEnvironment(): Record<string, string> {
  const url = `http://127.0.0.1:${RELAY_PORT}`
  return {
    HTTP_PROXY: url,
    HTTPS_PROXY: url,
    http_proxy: url,
    https_proxy: url,
    NO_PROXY: 'localhost,127.0.0.1',
    no_proxy: 'localhost,127.0.0.1',
  }
}
/** When to sweep again after a failed create: a cut-off engine call can land seconds later on a busy engine. */
const LATE_SWEEPS_MS = [1000, 3000, 8000]

/**
 * The Docker Engine backend. Each sandbox is one hardened container plus the
 * volumes its `ephemeral` mounts need; `create()` resolves once a command has
 * run in it, and removes everything it made if any step fails or the signal
 * aborts.
 */
export class DockerBackend implements CordonSandboxBackend {
  readonly tier = 'container' as const
  readonly name: 'container:docker' | 'container:runsc'
  private readonly engine: EngineConnection
  private readonly events: EngineEvents
  private readonly user: string
  private egressGateway: EgressGateway | undefined
  /** Image ids whose keep-alive and probe commands have been seen to run (see `waitUntilExecReady`). */
  private readonly provenImages = new Set<string>()

  constructor(
    private readonly config: ContainerBackendConfig,
    private readonly context: SandboxBackendContext,
  ) {
    this.name = config.runtime === 'runsc' ? 'container:runsc' : 'container:docker'
    this.engine = connectEngine(config)
    this.events = new EngineEvents(this.engine.docker, context.providerId)
    this.user = config.user ?? DEFAULT_USER
  }

  async create(options: SandboxBackendOptions): Promise<CordonSandbox> {
    const request = resolveBackendOptions(options)
    const layout = this.context.layout
    if (!layout) {
      throw new SandboxControlRefusedError(
        'layout',
        this.name,
        'the container tier needs a layout with an outputs mount',
      )
    }
    const proxied = request.egress.kind !== 'deny-all'
    const refusal = egressRefusal(this.name, this.config, request.egress)
    if (refusal) throw refusal
    const mounts = layoutMounts(request.id, layout, this.name, this.engine.socketPath)
    const volumes = workspaceVolumes(request.id, layout)
    // Everything is removed by name, so cleanup also catches a resource whose
    // create request was cut off by the deadline but completed on the engine.
    const names = {
      container: `cordon-${request.id}`,
      relay: undefined as string | undefined,
      volumes: volumes.map((volume) => volume.name),
    }
    let egress: SandboxEgress | undefined
    const timeoutMs = this.config.readyTimeoutMs ?? DEFAULT_READINESS_TIMEOUT_MS
    let phase = 'starting'

    const remove = async () => {
      await this.removeResources(names)
      await egress?.close()
    }
    const removeAfterFailure = async () => {
      await remove()
      // A create call the deadline cut off may still land on the engine; sweep once more shortly after.
      for (const delay of LATE_SWEEPS_MS)
        setTimeout(() => void remove().catch(() => {}), delay).unref()
    }
    return withDeadline(
      async (signal) => {
        await this.events.start()
        phase = 'creating volumes'
        for (const volume of volumes) await this.createVolume(request, volume, signal)
        // Behind the gateway, the relay owns the sandbox's network namespace
        // (loopback only) and the sandbox joins it. The relay is created
        // first, so its Node start-up overlaps the sandbox's create and start,
        // and the gateway registration overlaps both.
        const proxiedPolicy = request.egress.kind !== 'deny-all' ? request.egress : undefined
        let relay: RelayHandle | undefined
        let registration: Promise<SandboxEgress> | undefined
        if (proxiedPolicy) {
          phase = 'starting the egress gateway'
          const gateway = this.gateway()
          await gateway.ensureStarted()
          phase = 'taking an egress relay'
          relay = await gateway.takeRelay(signal)
          names.relay = relayContainerName(relay.relayId)
          registration = SandboxEgress.register(
            gateway,
            request.id,
            relay.relayId,
            proxiedPolicy,
            this.context.brokeredCredentials,
          )
          registration.catch(() => {})
        }
        phase = 'creating the container'
        const container = await this.engine.docker.createContainer({
          ...containerSpec({
            name: names.container,
            config: this.config,
            request,
            layout,
            mounts,
            labels: this.labels(request, 'sandbox'),
            networkMode: relay ? `container:${relay.container.id}` : 'none',
            runtimeName: this.runtimeName(proxied),
            proxyEnv: proxied ? proxyEnvironment() : {},
          }),
          abortSignal: signal,
        } as Docker.ContainerCreateOptions)
        phase = 'starting the container'
        await container.start()
        phase = 'waiting for exec readiness'
        const [registered] = await Promise.all([registration, relay?.ready])
        egress = registered
        const sandbox = new DockerSandbox({
          id: request.id,
          backend: this.name,
          endpoint: this.engine.endpoint,
          docker: this.engine.docker,
          container,
          user: this.user,
          owner: parseOwner(this.user),
          layout,
          workingDirectory: request.workingDirectory,
          execTimeoutMs: request.execTimeoutMs,
          events: this.events,
          egress,
          remove,
        })
        await this.waitUntilExecReady(container, sandbox, request.id, signal, timeoutMs)
        return sandbox
      },
      {
        timeoutMs,
        signal: request.signal,
        operation: 'create',
        onTimeout: () => new SandboxCreateTimeoutError(timeoutMs, phase),
        cleanup: removeAfterFailure,
        disposeLate: (late) => late.destroy(),
      },
    ).catch((error: unknown) => {
      throw translateEngineError(error, this.name, this.engine.endpoint, 'create')
    })
  }

  /**
   * Resolves once a command can run in the sandbox. Under runc a successful
   * start means the container's processes exist, so an exec can join them at
   * once; what a start cannot show is whether the image runs the keep-alive
   * at all (behind the init process, a missing `sleep` fails only after the
   * start). So the first sandbox of each image (by id) runs the probe command,
   * and later ones only check that the container is running: one inspect
   * instead of one exec round trip. gVisor always probes.
   */
  private async waitUntilExecReady(
    container: Docker.Container,
    sandbox: DockerSandbox,
    sandboxId: SandboxCreateRequest['id'],
    signal: AbortSignal,
    timeoutMs: number,
  ): Promise<void> {
    let imageId: string | undefined
    if (this.config.runtime !== 'runsc') {
      const info = await container.inspect({ abortSignal: signal })
      if (!info.State.Running) {
        throw new SandboxReadinessError(
          `the container stopped as soon as it started (exit code ${info.State.ExitCode})`,
          sandboxId,
        )
      }
      if (this.provenImages.has(info.Image)) return
      imageId = info.Image
    }
    const probe = await sandbox.exec('sleep', ['0'], { signal, timeout: timeoutMs })
    if (probe.exitCode !== 0) {
      throw new SandboxReadinessError(
        `the readiness probe (sleep 0) exited with ${probe.exitCode}: ${probe.stderr.trim() || probe.stdout.trim()}`,
        sandboxId,
      )
    }
    if (imageId !== undefined) this.provenImages.add(imageId)
  }

  private labels(request: SandboxCreateRequest, role: ResourceRole): Record<string, string> {
    return {
      ...this.config.labels,
      ...ownerLabels(this.context.providerId),
      [LABEL.sandbox]: request.id,
      [LABEL.role]: role,
      ...(request.lifetimeMs !== undefined
        ? { [LABEL.expires]: String(Date.now() + request.lifetimeMs) }
        : {}),
    }
  }

  /**
   * An `ephemeral` mount is a tmpfs-backed volume of the local driver. It is the
   * one volume type that (a) can be owned by the non-root sandbox user from the
   * start (a new disk volume is root's, and the archive API does not change the
   * owner of a volume's root), (b) has an enforced size cap, so a sandbox cannot
   * fill the engine's disk, and (c) is mounted on the engine's side, so the
   * archive API reaches it under a read-only root filesystem.
   */
  private async createVolume(
    request: SandboxCreateRequest,
    volume: WorkspaceVolume,
    signal: AbortSignal,
  ): Promise<void> {
    const { uid, gid } = parseOwner(this.user)
    await this.engine.docker.createVolume({
      Name: volume.name,
      Labels: this.labels(request, 'workspace'),
      Driver: 'local',
      DriverOpts: {
        type: 'tmpfs',
        device: 'tmpfs',
        o: `size=${volume.sizeMb}m,uid=${uid},gid=${gid},mode=0755,nosuid,nodev`,
      },
      abortSignal: signal,
    } as Docker.VolumeCreateOptions)
  }

  /** The engine runtime a sandbox runs under (see `runscProxiedRuntime` for gVisor behind the gateway). */
  private runtimeName(proxied: boolean): string | undefined {
    if (this.config.runtime !== 'runsc') return undefined
    return proxied ? this.config.runscProxiedRuntime : 'runsc'
  }

  private gateway(): EgressGateway {
    this.egressGateway ??= new EgressGateway(this.engine.docker, {
      image: this.config.gatewayImage!,
      hosts: this.config.gatewayHosts ?? {},
      allowedPorts: this.config.gatewayAllowedPorts,
      upstreamCa: this.config.gatewayUpstreamCa,
      context: this.context,
      extraLabels: this.config.labels ?? {},
    })
    return this.egressGateway
  }

  private async removeResources(names: {
    container: string
    relay: string | undefined
    volumes: readonly string[]
  }): Promise<void> {
    for (const name of [names.container, names.relay]) {
      if (!name) continue
      try {
        await this.engine.docker.getContainer(name).remove({ force: true, v: true })
      } catch (error) {
        if (!isNotFound(error) && !/already in progress/i.test(String((error as Error).message)))
          throw error
      }
    }
    for (const name of names.volumes) {
      try {
        await this.engine.docker.getVolume(name).remove({ force: true })
      } catch (error) {
        if (!isNotFound(error)) throw error
      }
    }
  }

  async close(): Promise<void> {
    this.events.close()
    await this.egressGateway?.stop()
  }
}

export function parseOwner(user: string): { uid: number; gid: number } {
  const [uid, gid] = user.split(':')
  const parsedUid = Number(uid)
  return { uid: parsedUid, gid: gid === undefined ? parsedUid : Number(gid) }
}
