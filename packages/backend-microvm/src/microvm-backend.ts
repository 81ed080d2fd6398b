import { newAgentSecret } from '@cordon/agent/protocol'
import { AgentSandbox, waitForAgent } from '@cordon/agent/sandbox'
import type { MicroVMBackendConfig } from '@cordon/builtin-backends'
import { type SandboxBackendOptions, SandboxTransportError } from '@cordon/core'
import {
  type CordonSandboxBackend,
  newSnapshotId,
  parseBackendConfig,
  resolveBackendOptions,
  resolverRefusedEvent,
  runCreateSequence,
  type SandboxBackendContext,
  type SandboxBackendFactory,
  withEnforcedLimits,
} from '@cordon/core/backend'
import { BACKEND_NAME, ControlPlaneClient } from './control-plane-client.js'
import { microVMBackend } from './definition.js'
import { encodeEgressAllowlist } from './egress-allowlist.js'
import {
  asSandboxSnapshot,
  ControlPlaneSnapshotStore,
  DEFAULT_SNAPSHOT_RETENTION_MS,
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
): CordonSandboxBackend {
  const config = parseBackendConfig(microVMBackend, input)
  const readyTimeoutMs = config.readyTimeoutMs ?? DEFAULT_READINESS_TIMEOUT_MS
  const vsockPort = config.agentVsockPort ?? DEFAULT_AGENT_VSOCK_PORT
  const controlPlane = new ControlPlaneClient({
    endpoint: config.orchestratorEndpoint,
    getToken: config.getToken,
    ...(config.controlPlaneMtls ? { tls: config.controlPlaneMtls } : {}),
  })
  const snapshotScope = config.agentSnapshot
  const snapshots = new ControlPlaneSnapshotStore(controlPlane, snapshotScope)
  const snapshotRetentionMs = config.snapshotRetentionMs ?? DEFAULT_SNAPSHOT_RETENTION_MS
  // Once per backend, on its first create: snapshots past their retention go.
  let retentionSweep: Promise<void> | undefined
  const sweepExpiredSnapshots = (): Promise<void> => {
    retentionSweep ??= snapshots
      .removeOlderThan(snapshotRetentionMs, AbortSignal.timeout(10_000))
      .then(
        () => {},
        // A control plane without snapshots, or one that is down, must not stop creates.
        () => {},
      )
    return retentionSweep
  }

  const create = async (backendOptions: SandboxBackendOptions): Promise<AgentSandbox> => {
    const request = withEnforcedLimits(
      resolveBackendOptions(backendOptions, microVMBackend, config),
    )
    // In the background: an orchestrator that is slow or down must not hold up (or fail) the create.
    void sweepExpiredSnapshots()
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
              'cordon.managed': '1',
              'cordon.provider': context.providerId,
              'cordon.sandbox': request.id,
            },
          },
          signal,
          (control) =>
            control === 'egress' || control.startsWith('egress.')
              ? `egress.${request.egress.kind}`
              : control,
        )
        mark('agent.health')
        const transport = new VsockAgentTransport(created.agent, {
          ...options.transport,
          secret,
          vsockPort,
          ...(config.mtls ? { tls: config.mtls } : {}),
        })
        const health = await waitForAgent(
          transport.client,
          request.id,
          signal,
          config.readyPollIntervalMs,
        )
        const sandbox = new AgentSandbox({
          id: request.id,
          rootDir: created.rootDir,
          writeRoots: health.writeRoots,
          env: request.env,
          workingDirectory: request.workingDirectory,
          execTimeoutMs: request.execTimeoutMs,
          client: transport.client,
          backend: BACKEND_NAME,
          environment: microVMBackend.enforcement.environment,
          enforcement: {
            backend: BACKEND_NAME,
            isolation: microVMBackend.enforcement.isolation,
            egress: {
              kind: request.egress.kind,
              ...(request.egress.kind === 'static'
                ? { allowedHosts: request.egress.allowedHosts }
                : {}),
            },
            limits: { memoryLimitMb: request.memoryLimitMb, maxProcesses: request.maxProcesses },
            mounts: health.writeRoots.map((path) => ({
              path,
              access: 'read-write' as const,
              noexec: false,
            })),
          },
          emit: context.emit,
          release: (releaseSignal) => controlPlane.deleteSandbox(request.id, releaseSignal),
          // The control plane's freezer: the hypervisor stops the guest's vCPUs.
          freezer: {
            pause: (freezeSignal) => controlPlane.pauseSandbox(request.id, freezeSignal),
            resume: (thawSignal) => controlPlane.resumeSandbox(request.id, thawSignal),
          },
          // The control plane's snapshot of the guest, named by a new snapshot id.
          snapshot: async (snapshotOptions) => {
            const snapshotId = newSnapshotId()
            const taken = await controlPlane.snapshotSandbox(
              request.id,
              {
                agentSnapshot: snapshotReference(snapshotId, snapshotScope),
                ...(snapshotOptions.memory ? { memory: true } : {}),
                labels: snapshotLabels(snapshotId, {
                  sandboxId: request.id,
                  providerId: context.providerId,
                  limits: {
                    memoryLimitMb: request.memoryLimitMb,
                    maxProcesses: request.maxProcesses,
                  },
                  egress: request.egress,
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
          explainLoss: () => controlPlane.whyGone(request.id, AbortSignal.timeout(10_000)),
        })
        mark('agent.working-directory')
        await sandbox.prepareWorkingDirectory(signal)
        mark('ready')
        return sandbox
      },
    )
  }

  return {
    tier: 'microvm',
    name: BACKEND_NAME,
    create,
    snapshots,
    async close() {
      await controlPlane.close()
    },
  }
}
