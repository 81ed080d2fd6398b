import { newAgentSecret } from '@cordon/agent/protocol'
import {
  type AgentClient,
  AgentSandbox,
  type HostHoldKeeper,
  keepHostHold,
  refusedTheSecret,
  waitForAgent,
} from '@cordon/agent/sandbox'
import type { MicroVMBackendConfig } from '@cordon/builtin-backends'
import {
  type EgressPolicy,
  type SandboxBackendOptions,
  SandboxControlRefusedError,
  SandboxCredentialRefusedError,
  type SandboxId,
  SandboxNotFoundError,
  SandboxTransportError,
} from '@cordon/core'
import {
  backgroundSweep,
  type ConnectedBackendSandbox,
  type CordonSandboxBackend,
  LABEL,
  newSnapshotId,
  ownerLabels,
  parseBackendConfig,
  resolveBackendOptions,
  resolverRefusedEvent,
  runCreateSequence,
  type SandboxBackendConnectRequest,
  type SandboxBackendContext,
  type SandboxBackendFactory,
  type SandboxListing,
  withEnforcedLimits,
} from '@cordon/core/backend'
import { requireAgentOutOfReach } from './agent-reach-check.js'
import { SWEEP_TIMEOUT_MS } from './configured-sweep.js'
import { BACKEND_NAME, controlPlaneFor } from './control-plane-client.js'
import type { SandboxAgentEndpoint } from './control-plane-types.js'
import { microVMBackend } from './definition.js'
import { removeEndedDetachedGuests } from './detached-sweep.js'
import { encodeEgressAllowlist } from './egress-allowlist.js'
import { removeGuestsOfGoneOwners } from './gone-owner-sweep.js'
import {
  decodeReconnectState,
  detachedLabels,
  encodeReconnectState,
  listingOf,
  type MicroVMReconnectState,
  type ReportedEgress,
} from './reconnect-state.js'
import {
  asSandboxSnapshot,
  ControlPlaneSnapshotStore,
  DEFAULT_SNAPSHOT_RETENTION_MS,
  SNAPSHOT_SWEEP_TIMEOUT_MS,
  snapshotLabels,
  snapshotReference,
} from './snapshot-store.js'
import {
  DEFAULT_AGENT_VSOCK_PORT,
  VsockAgentTransport,
  type VsockTransportTuning,
} from './vsock-agent-transport.js'

/** Default budget for `create()`: control-plane call plus the agent answering health. */
export const DEFAULT_READINESS_TIMEOUT_MS = 60_000

/**
 * Default for `hostGoneGraceMs`: how long a guest that is not detached runs
 * on after its host process is gone. A killed host's connection closes at
 * once, so this is all the wait there is; a host that is alive but starved
 * (a loaded machine, a long GC pause) loses its hold only after four silent
 * heartbeats (20 s at the default 5 s) and redials within a second of
 * running again, so 30 s on top keeps its guest through a stall of well
 * over half a minute while a dead host's guest is gone within one.
 */
export const DEFAULT_HOST_GONE_GRACE_MS = 30_000

/** Tuning that is not part of the validated config (tests, unusual networks). */
export interface MicroVMBackendOptions {
  readonly transport?: Omit<VsockTransportTuning, 'secret' | 'tls' | 'vsockPort'>
}

/**
 * The `microvm:self-hosted` backend: asks the orchestrator's control plane for
 * a guest (resumed from a snapshot), then talks to the cordon agent inside it.
 *
 * `create()` resolves only when the agent in the new guest answered a health
 * request over an authenticated connection. If anything fails, times out or is
 * aborted on the way, the guest is deleted before `create()` rejects (the
 * sandbox id is chosen here, so even a create whose response never arrived is
 * deleted by id).
 *
 * Construction does no I/O.
 */
export const createBackend: SandboxBackendFactory<MicroVMBackendConfig> = (input, context) =>
  createMicroVMBackend(input, context)

export function createMicroVMBackend(
  input: MicroVMBackendConfig,
  context: SandboxBackendContext,
  options: MicroVMBackendOptions = {},
): CordonSandboxBackend<'microvm'> {
  const config = parseBackendConfig(microVMBackend, input)
  const readyTimeoutMs = config.readyTimeoutMs ?? DEFAULT_READINESS_TIMEOUT_MS
  const hostGoneGraceMs = config.hostGoneGraceMs ?? DEFAULT_HOST_GONE_GRACE_MS
  const vsockPort = config.agentVsockPort ?? DEFAULT_AGENT_VSOCK_PORT
  const controlPlane = controlPlaneFor(config)
  const snapshotScope = config.agentSnapshot
  const snapshots = new ControlPlaneSnapshotStore(controlPlane, snapshotScope)
  const snapshotRetentionMs = config.snapshotRetentionMs ?? DEFAULT_SNAPSHOT_RETENTION_MS
  // In the background of the backend's first create (and of the next one
  // after a sweep that failed: a control plane down or slow for a moment,
  // one deletion refused): snapshots past their retention go.
  const retentionSweep = backgroundSweep(
    (signal) => snapshots.removeOlderThan(snapshotRetentionMs, signal),
    SNAPSHOT_SWEEP_TIMEOUT_MS,
  )

  /**
   * In the background of the backend's first create, connect or list (and
   * of the next one after a sweep that failed): deletes the detached guests
   * past their end time ({@link removeEndedDetachedGuests}) and the guests,
   * not detached, whose creating host process this machine can tell has
   * ended ({@link removeGuestsOfGoneOwners}: one left paused would otherwise
   * never end); what `cordon gc --microvm` runs too.
   */
  const detachedSweep = backgroundSweep(
    (signal) => removeEndedDetachedGuests(controlPlane, signal),
    SWEEP_TIMEOUT_MS,
  )
  const goneOwnerSweep = backgroundSweep(
    (signal) => removeGuestsOfGoneOwners(controlPlane, signal),
    SWEEP_TIMEOUT_MS,
  )
  const sweepAbandonedGuests = (): void => {
    detachedSweep.run()
    goneOwnerSweep.run()
  }

  const create = async (backendOptions: SandboxBackendOptions): Promise<AgentSandbox> => {
    const request = withEnforcedLimits(
      resolveBackendOptions(backendOptions, microVMBackend, config),
    )
    // In the background: an orchestrator that is slow or down must not hold up (or fail) the create.
    retentionSweep.run()
    sweepAbandonedGuests()
    return runCreateSequence(
      {
        sandboxId: request.id,
        backend: BACKEND_NAME,
        timeoutMs: readyTimeoutMs,
        signal: request.signal,
        onStep: request.onStep,
        emit: context.emit,
        firstStep: 'egress.resolve',
        cleanup: () => controlPlane.deleteSandbox(request.id),
        cleanupWhat: 'deleting the guest',
      },
      async ({ signal, step: mark }) => {
        const egressAllowlist = await encodeEgressAllowlist(request.egress, signal, (problem) =>
          context.emit(resolverRefusedEvent(request.id, BACKEND_NAME, problem)),
        )
        mark('control-plane.create')
        const secret = newAgentSecret()
        // One end time for its label and for the creator's handle (sandbox.endsAt).
        const endsAt =
          request.detached && request.lifetimeMs !== undefined
            ? Date.now() + request.lifetimeMs
            : undefined
        const created = await controlPlane.createSandbox(
          {
            sandboxId: request.id,
            // A cordon snapshot names its own template and replaces the configured agentSnapshot.
            ...(request.snapshot !== undefined
              ? { agentSnapshot: snapshotReference(request.snapshot, snapshotScope) }
              : {
                  ...(config.template === undefined ? {} : { template: config.template }),
                  ...(config.agentSnapshot === undefined
                    ? {}
                    : { agentSnapshot: config.agentSnapshot }),
                }),
            memoryLimitMb: request.memoryLimitMb,
            maxProcesses: request.maxProcesses,
            ...(request.lifetimeMs === undefined ? {} : { timeoutMs: request.lifetimeMs }),
            ...(egressAllowlist === undefined ? {} : { egressAllowlist }),
            agentVsockPort: vsockPort,
            agentSecret: secret,
            labels: {
              // Who created it, so that a sweep on this machine can tell once that
              // process has ended (gone-owner-sweep.ts); managed and provider among them.
              ...ownerLabels(context.providerId),
              'cordon.sandbox': request.id,
              ...(endsAt !== undefined ? detachedLabels(endsAt) : {}),
            },
          },
          signal,
          (control) =>
            control === 'egress' || control.startsWith('egress.')
              ? `egress.${request.egress.kind}`
              : control,
        )
        mark('agent.health')
        const transport = transportFor(created.agent, secret)
        const health = await waitForAgent(
          transport.client,
          request.id,
          signal,
          config.readyPollIntervalMs,
        )
        try {
          requireAgentOutOfReach(health, request.id)
        } catch (error) {
          transport.client.close()
          throw error
        }
        // A guest that is not detached ends with this host (the agent's
        // `hold-host`): held before the create resolves, so no guest is
        // handed out that its host's death would not end.
        let hold: HostHoldKeeper | undefined
        if (!request.detached) {
          try {
            hold = await keepHostHold(transport.client, hostGoneGraceMs)
          } catch (error) {
            transport.client.close()
            throw error
          }
        }
        const state: MicroVMReconnectState = {
          secret,
          env: request.env,
          workingDirectory: request.workingDirectory ?? created.rootDir,
          memoryLimitMb: request.memoryLimitMb,
          maxProcesses: request.maxProcesses,
          egress: publicEgress(request.egress),
        }
        const sandbox = sandboxOf({
          id: request.id,
          rootDir: created.rootDir,
          writeRoots: health.writeRoots,
          client: transport.client,
          state,
          execTimeoutMs: request.execTimeoutMs,
          detached: request.detached,
          endsAt,
          hold,
        })
        mark('agent.working-directory')
        try {
          await sandbox.prepareWorkingDirectory(signal)
        } catch (error) {
          // The create's cleanup deletes the guest: nothing to hold on to.
          hold?.stop()
          throw error
        }
        mark('ready')
        return sandbox
      },
    )
  }

  /**
   * The sandbox over an authenticated client of a guest's agent, for
   * `create()` and `connect()`. A detached one carries its reconnect state
   * as its secret and can be let go of (`disconnect()`): the guest runs on
   * until its `timeoutMs`, which the orchestrator counts.
   */
  function sandboxOf(parts: {
    readonly id: SandboxId
    readonly rootDir: string
    readonly writeRoots: readonly string[]
    readonly client: AgentClient
    readonly state: MicroVMReconnectState
    readonly execTimeoutMs: number
    readonly detached: boolean
    /** A detached guest's end time as its label holds it, where the create fixed it. */
    readonly endsAt?: number | undefined
    /** The creator's hold on a guest that is not detached: let go of when the guest is deleted. */
    readonly hold?: HostHoldKeeper | undefined
  }): AgentSandbox {
    const { id, state } = parts
    const limits = { memoryLimitMb: state.memoryLimitMb, maxProcesses: state.maxProcesses }
    return new AgentSandbox({
      id,
      rootDir: parts.rootDir,
      writeRoots: parts.writeRoots,
      env: state.env,
      workingDirectory: state.workingDirectory,
      execTimeoutMs: parts.execTimeoutMs,
      client: parts.client,
      backend: BACKEND_NAME,
      environment: microVMBackend.enforcement.environment,
      enforcement: {
        backend: BACKEND_NAME,
        isolation: microVMBackend.enforcement.isolation,
        egress: state.egress,
        limits,
        mounts: parts.writeRoots.map((path) => ({
          path,
          access: 'read-write' as const,
          noexec: false,
        })),
      },
      emit: context.emit,
      release: async (releaseSignal) => {
        // Before the delete: a redial into a guest on its way out would only fail.
        parts.hold?.stop()
        await controlPlane.deleteSandbox(id, releaseSignal)
      },
      // The control plane's freezer: the hypervisor stops the guest's vCPUs.
      freezer: {
        pause: (freezeSignal) => controlPlane.pauseSandbox(id, freezeSignal),
        resume: (thawSignal) => controlPlane.resumeSandbox(id, thawSignal),
      },
      // The control plane's snapshot of the guest, named by a new snapshot id.
      snapshot: async (snapshotOptions) => {
        const snapshotId = newSnapshotId()
        const taken = await controlPlane.snapshotSandbox(
          id,
          {
            agentSnapshot: snapshotReference(snapshotId, snapshotScope),
            ...(snapshotOptions.memory ? { memory: true } : {}),
            labels: snapshotLabels(snapshotId, {
              sandboxId: id,
              providerId: context.providerId,
              limits,
              egress: state.egress,
            }),
          },
          snapshotOptions.signal,
        )
        const snapshot = asSandboxSnapshot(taken)
        if (!snapshot)
          throw new SandboxTransportError(
            `the control plane answered a snapshot without the labels it was given`,
            config.orchestratorEndpoint,
            { cause: taken },
          )
        return snapshot
      },
      explainLoss: () => controlPlane.whyGone(id, AbortSignal.timeout(10_000)),
      ...(parts.detached
        ? {
            ...(parts.endsAt !== undefined ? { endsAt: parts.endsAt } : {}),
            reconnectSecret: encodeReconnectState(state),
            // The guest goes on; AgentSandbox has closed this host's connections.
            disconnect: async () => {},
          }
        : {}),
    })
  }

  const transportFor = (agent: SandboxAgentEndpoint, secret: string): VsockAgentTransport =>
    new VsockAgentTransport(agent, {
      ...options.transport,
      secret,
      vsockPort,
      ...(config.mtls ? { tls: config.mtls } : {}),
    })

  const connect = async (
    request: SandboxBackendConnectRequest,
  ): Promise<ConnectedBackendSandbox> => {
    const id = request.sandboxId
    const state = decodeReconnectState(request.secret, id)
    sweepAbandonedGuests()
    const signal = request.signal ?? AbortSignal.timeout(readyTimeoutMs)
    const guest = await controlPlane.describeSandbox(id, signal)
    if (guest?.labels[LABEL.managed] !== '1' || guest.labels[LABEL.sandbox] !== id)
      throw new SandboxNotFoundError(
        id,
        `the control plane at ${config.orchestratorEndpoint} has no guest for it (it was destroyed, or its lifetime ran out)`,
      )
    if (guest.labels[LABEL.detached] !== '1')
      throw new SandboxNotFoundError(id, 'it was not created detached: it ends with its creator')
    if (guest.state === 'creating')
      throw new SandboxNotFoundError(id, 'its guest is still being created')
    if (guest.agent === undefined || guest.rootDir === undefined)
      throw new SandboxControlRefusedError(
        'connect',
        BACKEND_NAME,
        "the control plane's description of the guest names no agent endpoint or rootDir (openapi.yaml: Reconnect)",
      )
    const endsAt = Number(guest.labels[LABEL.expires])
    // A guest a host paused answers nothing: connecting continues it. Only
    // its agent can judge the credential, so a connect that fails (a wrong
    // credential above all) freezes it again: its owner left it paused.
    const wasPaused = guest.state === 'paused'
    if (wasPaused) await controlPlane.resumeSandbox(id, signal)
    const transport = transportFor(guest.agent, state.secret)
    let writeRoots: readonly string[]
    try {
      // The first authenticated request proves the credential.
      const health = await transport.client.health(signal)
      requireAgentOutOfReach(health, id)
      writeRoots = health.writeRoots
      // A pause held the agent's deadlines (AgentSandbox pauses its clocks first): they run again now.
      if (wasPaused) await transport.client.clocks('resume-clocks', signal)
    } catch (error) {
      transport.client.close()
      // Its own deadline: the caller's signal may be what ended the connect.
      if (wasPaused)
        await controlPlane.pauseSandbox(id, AbortSignal.timeout(readyTimeoutMs)).catch(() => {})
      if (refusedTheSecret(error))
        throw new SandboxCredentialRefusedError(id, "the sandbox's agent refused the credential", {
          cause: error,
        })
      throw error
    }
    const sandbox = sandboxOf({
      id,
      rootDir: guest.rootDir,
      writeRoots,
      client: transport.client,
      state,
      execTimeoutMs: request.execTimeoutMs,
      detached: true,
    })
    return { sandbox, endsAt: Number.isFinite(endsAt) && endsAt > 0 ? endsAt : Date.now() }
  }

  const list = async (listOptions: {
    readonly signal?: AbortSignal
  }): Promise<readonly SandboxListing[]> => {
    sweepAbandonedGuests()
    const guests = await controlPlane.listSandboxes({ [LABEL.managed]: '1' }, listOptions.signal)
    return guests.flatMap((guest) => listingOf(guest, context.providerId))
  }

  return {
    tier: 'microvm',
    name: BACKEND_NAME,
    create,
    connect,
    list,
    snapshots,
    async close() {
      await Promise.all([detachedSweep.stop(), goneOwnerSweep.stop(), retentionSweep.stop()])
      await controlPlane.close()
    },
  }
}

/** The egress policy as the sandbox reports it (a resolver's function is not kept). */
function publicEgress(egress: EgressPolicy): ReportedEgress {
  return egress.kind === 'static'
    ? { kind: 'static', allowedHosts: egress.allowedHosts }
    : { kind: egress.kind }
}
