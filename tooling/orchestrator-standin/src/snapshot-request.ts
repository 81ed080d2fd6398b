/** Snapshot shapes as the stand-in accepts and stores them (see packages/backend-microvm/openapi.yaml). */

export const SANDBOX_ID_PATTERN = /^sbx_[a-z2-7]{26}$/
/** Each part of a snapshot reference: it becomes a path segment, so no slash, no dot-only name. */
const REF_PART = /^[A-Za-z0-9._-]{1,128}$/
export const LABEL_KEY = /^[a-z0-9][a-z0-9._/-]*$/i

export interface AgentSnapshotRef {
  readonly orgId: string
  readonly agentId: string
  readonly version: string
}

export interface ValidSnapshotRequest {
  readonly agentSnapshot: AgentSnapshotRef
  readonly memory: boolean
  readonly labels: Readonly<Record<string, string>>
}

export interface StoredSnapshot {
  /** `orgId/agentId/version`. */
  readonly key: string
  readonly agentSnapshot: AgentSnapshotRef
  readonly sourceSandboxId: string
  readonly template?: string
  /** The guest image it is layered on. */
  readonly image: string
  /** The tar archive of the guest's writable filesystem. */
  readonly archivePath: string
  readonly memory: boolean
  readonly sizeBytes: number
  readonly createdAt: string
  readonly labels: Readonly<Record<string, string>>
}

export function snapshotKey(ref: AgentSnapshotRef): string {
  return `${ref.orgId}/${ref.agentId}/${ref.version}`
}

/** The problems of an agent snapshot reference, as `name.field must ...`. */
export function refProblems(value: unknown, name: string): string[] {
  if (typeof value !== 'object' || value === null || Array.isArray(value))
    return [`${name} must be an object with orgId, agentId and version`]
  const ref = value as Record<string, unknown>
  return (['orgId', 'agentId', 'version'] as const)
    .filter((key) => {
      const part = ref[key]
      return typeof part !== 'string' || !REF_PART.test(part) || /^\.+$/.test(part)
    })
    .map((key) => `${name}.${key} must be 1 to 128 letters, digits, '.', '_' or '-'`)
}

/** Validates a snapshot request body; returns every problem found, or the request. */
export function parseSnapshotRequest(body: unknown): {
  problems: string[]
  request?: ValidSnapshotRequest
} {
  if (typeof body !== 'object' || body === null || Array.isArray(body))
    return { problems: ['the body must be a JSON object'] }
  const raw = body as Record<string, unknown>
  const problems = refProblems(raw.agentSnapshot, 'agentSnapshot')
  if (raw.memory !== undefined && typeof raw.memory !== 'boolean')
    problems.push('memory must be a boolean')
  const labels: Record<string, string> = {}
  if (typeof raw.labels !== 'object' || raw.labels === null || Array.isArray(raw.labels))
    problems.push('labels must be an object of strings')
  else {
    for (const [key, value] of Object.entries(raw.labels)) {
      if (!LABEL_KEY.test(key) || typeof value !== 'string')
        problems.push(`label ${key} is not a valid key with a string value`)
      else labels[key] = value
    }
  }
  if (problems.length > 0) return { problems }
  const ref = raw.agentSnapshot as Record<string, string>
  return {
    problems,
    request: {
      agentSnapshot: { orgId: ref.orgId!, agentId: ref.agentId!, version: ref.version! },
      memory: raw.memory === true,
      labels,
    },
  }
}

/** A stored snapshot as the API shows it (`Snapshot` in openapi.yaml): no host paths. */
export function snapshotView(snapshot: StoredSnapshot): Record<string, unknown> {
  return {
    agentSnapshot: snapshot.agentSnapshot,
    sourceSandboxId: snapshot.sourceSandboxId,
    ...(snapshot.template === undefined ? {} : { template: snapshot.template }),
    memory: snapshot.memory,
    sizeBytes: snapshot.sizeBytes,
    createdAt: snapshot.createdAt,
    labels: snapshot.labels,
  }
}
