import type { MicroVMBackendConfig } from '@cordon/builtin-backends'
import {
  isSnapshotId,
  type SandboxSnapshot,
  type SandboxSnapshotListOptions,
  SandboxSnapshotNotFoundError,
  type SandboxSnapshotStore,
} from '@cordon/core'
import { LABEL, parseBackendConfig, removeEach } from '@cordon/core/backend'
import { BACKEND_NAME, type ControlPlaneClient, controlPlaneFor } from './control-plane-client.js'
import type { AgentSnapshotReference, SnapshotBody } from './control-plane-types.js'
import { microVMBackend } from './definition.js'
import type { ReportedEgress } from './reconnect-state.js'

/** How long a snapshot cordon took is kept on the orchestrator unless the config says otherwise: 7 days. */
export const DEFAULT_SNAPSHOT_RETENTION_MS = 7 * 24 * 60 * 60 * 1000
/** How long removing expired snapshots may take when the caller gives no signal. */
export const SNAPSHOT_SWEEP_TIMEOUT_MS = 60_000

/** Labels a cordon snapshot carries on the control plane, beside the owner's. */
export const SNAPSHOT_LABEL = {
  id: 'cordon.snapshot',
  limits: 'cordon.snapshot.limits',
  egress: 'cordon.snapshot.egress',
} as const

/**
 * Where cordon's snapshots live among the orchestrator's per-agent snapshots:
 * under the configured `agentSnapshot`'s organization and agent (so an
 * operator finds them beside that agent's own), else under `cordon/cordon`,
 * with the snapshot id (`snp_…`) as the version.
 */
export function snapshotReference(
  snapshotId: string,
  scope: { readonly orgId: string; readonly agentId: string } | undefined,
): AgentSnapshotReference {
  return {
    orgId: scope?.orgId ?? 'cordon',
    agentId: scope?.agentId ?? 'cordon',
    version: snapshotId,
  }
}

/** What a snapshot keeps of the sandbox it was taken of, so a create from it gets the same. */
export interface SnapshotSource {
  readonly sandboxId: string
  readonly providerId: string
  readonly limits: { readonly memoryLimitMb?: number; readonly maxProcesses?: number }
  readonly egress: ReportedEgress
}

/** The labels of a new snapshot: the owner's, its id, and the source's limits and egress. */
export function snapshotLabels(snapshotId: string, source: SnapshotSource): Record<string, string> {
  const egress =
    source.egress.kind === 'static'
      ? { kind: 'static', allowedHosts: [...source.egress.allowedHosts] }
      : { kind: source.egress.kind }
  return {
    [LABEL.managed]: '1',
    [LABEL.provider]: source.providerId,
    [LABEL.sandbox]: source.sandboxId,
    [LABEL.role]: 'snapshot',
    [SNAPSHOT_LABEL.id]: snapshotId,
    [SNAPSHOT_LABEL.limits]: JSON.stringify(source.limits),
    [SNAPSHOT_LABEL.egress]: JSON.stringify(egress),
  }
}

/** A control-plane snapshot as cordon's `SandboxSnapshot`, or undefined for one cordon did not take. */
export function asSandboxSnapshot(body: SnapshotBody): SandboxSnapshot | undefined {
  const id = body.labels[SNAPSHOT_LABEL.id]
  if (body.labels[LABEL.managed] !== '1' || id === undefined || id !== body.agentSnapshot.version)
    return undefined
  const parse = <T>(text: string | undefined, fallback: T): T => {
    try {
      return text === undefined ? fallback : (JSON.parse(text) as T)
    } catch {
      return fallback
    }
  }
  return {
    id,
    createdAt: Date.parse(body.createdAt),
    sizeBytes: body.sizeBytes,
    memory: body.memory,
    backend: BACKEND_NAME,
    sourceSandboxId: body.sourceSandboxId,
    limits: parse(body.labels[SNAPSHOT_LABEL.limits], {}),
    egress: parse(body.labels[SNAPSHOT_LABEL.egress], { kind: 'deny-all' as const }),
  }
}

/**
 * The snapshots this backend keeps, on the orchestrator: `provider.snapshots`
 * and the provider's create-from-snapshot read them here. They live on the
 * orchestrator until removed; an id it does not have is
 * `SandboxSnapshotNotFoundError`.
 */
export class ControlPlaneSnapshotStore implements SandboxSnapshotStore {
  constructor(
    private readonly controlPlane: ControlPlaneClient,
    private readonly scope: { readonly orgId: string; readonly agentId: string } | undefined,
  ) {}

  async get(id: string, options: SandboxSnapshotListOptions = {}): Promise<SandboxSnapshot> {
    const found = await this.find(id, options.signal)
    if (!found) throw new SandboxSnapshotNotFoundError(id, BACKEND_NAME)
    return found
  }

  async list(options: SandboxSnapshotListOptions = {}): Promise<readonly SandboxSnapshot[]> {
    const listed = await this.controlPlane.listSnapshots(
      { [LABEL.managed]: '1', [LABEL.role]: 'snapshot' },
      options.signal,
    )
    return listed
      .map(asSandboxSnapshot)
      .filter((snapshot): snapshot is SandboxSnapshot => snapshot !== undefined)
      .sort((a, b) => a.createdAt - b.createdAt)
  }

  /**
   * Removes cordon's snapshots older than `retentionMs`, whoever took them;
   * resolves with the ids removed (with `dryRun`, the ids it would remove,
   * removing nothing). Sandboxes already started from one go on.
   */
  async removeOlderThan(
    retentionMs: number,
    signal?: AbortSignal,
    dryRun = false,
  ): Promise<string[]> {
    const cutoff = Date.now() - retentionMs
    const expired = (await this.list(signal ? { signal } : {})).filter(
      (snapshot) => snapshot.createdAt < cutoff,
    )
    if (!dryRun)
      // One that cannot be deleted does not keep the others: all are tried, then it is reported.
      await removeEach(
        expired,
        (snapshot) => snapshot.id,
        (snapshot) =>
          this.controlPlane.deleteSnapshot(snapshotReference(snapshot.id, this.scope), signal),
      )
    return expired.map((snapshot) => snapshot.id)
  }

  async remove(id: string, options: SandboxSnapshotListOptions = {}): Promise<void> {
    if (!(await this.find(id, options.signal)))
      throw new SandboxSnapshotNotFoundError(id, BACKEND_NAME)
    await this.controlPlane.deleteSnapshot(snapshotReference(id, this.scope), options.signal)
  }

  private async find(
    id: string,
    signal: AbortSignal | undefined,
  ): Promise<SandboxSnapshot | undefined> {
    if (!isSnapshotId(id)) return undefined
    const body = await this.controlPlane.getSnapshot(snapshotReference(id, this.scope), signal)
    return body ? asSandboxSnapshot(body) : undefined
  }
}

/**
 * `cordon gc` for the orchestrator's snapshots, for a host's own schedule
 * and for `cordon gc --microvm`: removes cordon's snapshots on the configured
 * control plane older than `retentionMs` (default the config's
 * `snapshotRetentionMs`, else {@link DEFAULT_SNAPSHOT_RETENTION_MS}),
 * whoever took them, and resolves with their ids (with `dryRun`, the ids it
 * would remove, removing nothing). Each backend's first create does the
 * same with the config's retention. A snapshot cordon did not take is never
 * touched.
 */
export async function removeExpiredMicroVMSnapshots(
  input: MicroVMBackendConfig,
  options: {
    readonly signal?: AbortSignal
    readonly dryRun?: boolean
    readonly retentionMs?: number
  } = {},
): Promise<string[]> {
  const config = parseBackendConfig(microVMBackend, input)
  const controlPlane = controlPlaneFor(config)
  try {
    return await new ControlPlaneSnapshotStore(controlPlane, config.agentSnapshot).removeOlderThan(
      options.retentionMs ?? config.snapshotRetentionMs ?? DEFAULT_SNAPSHOT_RETENTION_MS,
      options.signal ?? AbortSignal.timeout(SNAPSHOT_SWEEP_TIMEOUT_MS),
      options.dryRun === true,
    )
  } finally {
    await controlPlane.close()
  }
}
