import type { MicroVMBackendConfig } from '@cordon/builtin-backends'
import {
  SandboxControlRefusedError,
  SandboxDestroyedError,
  type SandboxError,
  SandboxTransportError,
  type TlsClientMaterial,
} from '@cordon/core'
import { JsonHttpClient, type JsonHttpResponse } from '@cordon/core/backend'
import type {
  AgentSnapshotReference,
  ControlPlaneErrorBody,
  CreateSandboxRequestBody,
  CreateSandboxResponseBody,
  CreateSnapshotRequestBody,
  SandboxAgentEndpoint,
  SandboxDescriptionBody,
  SnapshotBody,
} from './control-plane-types.js'

export const BACKEND_NAME = 'microvm:self-hosted'

export interface ControlPlaneClientOptions {
  readonly endpoint: string
  /** Called before every request, so a long-lived backend follows token rotation. */
  readonly getToken: () => Promise<string>
  /** Client certificate (and CA) for a control plane that requires mutual TLS. */
  readonly tls?: TlsClientMaterial
}

/** The backend's client of the control plane a (validated) backend config names. */
export function controlPlaneFor(config: MicroVMBackendConfig): ControlPlaneClient {
  return new ControlPlaneClient({
    endpoint: config.orchestratorEndpoint,
    getToken: config.getToken,
    ...(config.controlPlaneMtls ? { tls: config.controlPlaneMtls } : {}),
  })
}

/**
 * The backend's client of the orchestrator's control plane (openapi.yaml), on
 * the kit's `JsonHttpClient` (a fresh bearer token per request; GET and
 * DELETE retried through throttling and transient failures, the create's
 * POST sent once). Translates every failure into a cordon error at this
 * boundary, keeping the HTTP or network error as `cause`; the orchestrator's
 * own refusal of a control (`control-refused`) becomes
 * `SandboxControlRefusedError`.
 */
export class ControlPlaneClient {
  private readonly http: JsonHttpClient

  constructor(options: ControlPlaneClientOptions) {
    this.http = new JsonHttpClient({
      backend: BACKEND_NAME,
      endpoint: options.endpoint,
      getToken: options.getToken,
      tokenClosureName: 'getToken',
      audience: 'the control plane',
      ...(options.tls ? { tls: options.tls } : {}),
    })
  }

  async createSandbox(
    body: CreateSandboxRequestBody,
    signal: AbortSignal | undefined,
    describeRefusedControl: (control: string) => string = (control) => control,
  ): Promise<CreateSandboxResponseBody> {
    const response = await this.http.send('POST', this.http.urlFor('/v1/sandboxes'), {
      body,
      ...(signal ? { signal } : {}),
    })
    if (response.status !== 201 && response.status !== 200)
      throw this.failure('create', response, describeRefusedControl)
    return parseCreateResponse(response.body, body.sandboxId, this.http.urlFor(''))
  }

  /** Deletes a guest. A guest the control plane does not know is already gone. */
  async deleteSandbox(sandboxId: string, signal?: AbortSignal): Promise<void> {
    const response = await this.http.send('DELETE', this.sandboxUrl(sandboxId), {
      ...(signal ? { signal } : {}),
    })
    if (response.status === 204 || response.status === 200 || response.status === 404) return
    throw this.failure('delete', response)
  }

  /**
   * Whether a guest is gone: `evicted` when the control plane no longer has
   * it (removed by the orchestrator, a host failure, an operator), undefined
   * while it exists.
   */
  async whyGone(sandboxId: string, signal?: AbortSignal): Promise<'evicted' | undefined> {
    const response = await this.http.send('GET', this.sandboxUrl(sandboxId), {
      ...(signal ? { signal } : {}),
    })
    if (response.status === 404) return 'evicted'
    if (response.status === 200) return undefined
    throw this.failure('describe', response)
  }

  /**
   * Freezes every process of a guest; resolves once they are frozen. Pausing
   * a paused guest changes nothing, so the request is retried like a GET. A
   * guest the control plane no longer has rejects with
   * `SandboxDestroyedError`; a control plane that cannot freeze guests, with
   * `SandboxControlRefusedError` naming `pause`.
   */
  async pauseSandbox(sandboxId: string, signal?: AbortSignal): Promise<void> {
    await this.freezerCall('pause', sandboxId, signal)
  }

  /** Continues a paused guest; the counterpart of {@link pauseSandbox} (`resume`). */
  async resumeSandbox(sandboxId: string, signal?: AbortSignal): Promise<void> {
    await this.freezerCall('resume', sandboxId, signal)
  }

  /**
   * Captures a guest as a per-agent snapshot named by `body.agentSnapshot`,
   * which a later create's `agentSnapshot` resumes. Sent once (a retry after
   * a lost answer would meet the snapshot it made as a conflict). A memory
   * capture the control plane cannot make rejects with
   * `SandboxControlRefusedError` naming `snapshot.memory`.
   */
  async snapshotSandbox(
    sandboxId: string,
    body: CreateSnapshotRequestBody,
    signal?: AbortSignal,
  ): Promise<SnapshotBody> {
    const response = await this.http.send('POST', `${this.sandboxUrl(sandboxId)}/snapshots`, {
      body,
      ...(signal ? { signal } : {}),
    })
    if (response.status === 404) throw this.guestGone(sandboxId, response)
    if (response.status !== 201 && response.status !== 200) throw this.failure('snapshot', response)
    return parseSnapshot(response.body, this.http.urlFor(''))
  }

  /** A guest as the control plane describes it, or undefined when it has none by that id. */
  async describeSandbox(
    sandboxId: string,
    signal?: AbortSignal,
  ): Promise<SandboxDescriptionBody | undefined> {
    const response = await this.http.send('GET', this.sandboxUrl(sandboxId), {
      ...(signal ? { signal } : {}),
    })
    if (response.status === 404) return undefined
    if (response.status !== 200) throw this.failure('describe', response)
    return parseDescription(response.body, this.http.urlFor(''))
  }

  /** The guests carrying every label given. */
  async listSandboxes(
    labels: Readonly<Record<string, string>>,
    signal?: AbortSignal,
  ): Promise<SandboxDescriptionBody[]> {
    const query = new URLSearchParams()
    for (const [key, value] of Object.entries(labels)) query.append('label', `${key}=${value}`)
    const response = await this.http.send('GET', this.http.urlFor(`/v1/sandboxes?${query}`), {
      ...(signal ? { signal } : {}),
    })
    if (response.status !== 200) throw this.failure('list', response)
    const listed = (response.body as { sandboxes?: unknown } | undefined)?.sandboxes
    if (!Array.isArray(listed))
      throw new SandboxTransportError(
        'control plane returned an unusable sandbox list: sandboxes must be an array',
        this.http.urlFor(''),
        { cause: response.body },
      )
    return listed.map((entry) => parseDescription(entry, this.http.urlFor('')))
  }

  /** The snapshots carrying every label given (all of them without). */
  async listSnapshots(
    labels: Readonly<Record<string, string>> = {},
    signal?: AbortSignal,
  ): Promise<SnapshotBody[]> {
    const query = new URLSearchParams()
    for (const [key, value] of Object.entries(labels)) query.append('label', `${key}=${value}`)
    const search = query.toString() === '' ? '' : `?${query}`
    const response = await this.http.send('GET', this.http.urlFor(`/v1/snapshots${search}`), {
      ...(signal ? { signal } : {}),
    })
    if (response.status !== 200) throw this.failure('list snapshots', response)
    const listed = (response.body as { snapshots?: unknown } | undefined)?.snapshots
    if (!Array.isArray(listed))
      throw new SandboxTransportError(
        'control plane returned an unusable snapshot list: snapshots must be an array',
        this.http.urlFor(''),
        { cause: response.body },
      )
    return listed.map((entry) => parseSnapshot(entry, this.http.urlFor('')))
  }

  /** One snapshot, or undefined when the control plane has none by that reference. */
  async getSnapshot(
    ref: AgentSnapshotReference,
    signal?: AbortSignal,
  ): Promise<SnapshotBody | undefined> {
    const response = await this.http.send('GET', this.snapshotUrl(ref), {
      ...(signal ? { signal } : {}),
    })
    if (response.status === 404) return undefined
    if (response.status !== 200) throw this.failure('describe snapshot', response)
    return parseSnapshot(response.body, this.http.urlFor(''))
  }

  /** Removes a snapshot. One the control plane does not know is already gone. */
  async deleteSnapshot(ref: AgentSnapshotReference, signal?: AbortSignal): Promise<void> {
    const response = await this.http.send('DELETE', this.snapshotUrl(ref), {
      ...(signal ? { signal } : {}),
    })
    if (response.status === 204 || response.status === 200 || response.status === 404) return
    throw this.failure('delete snapshot', response)
  }

  async close(): Promise<void> {
    await this.http.close()
  }

  private async freezerCall(
    operation: 'pause' | 'resume',
    sandboxId: string,
    signal: AbortSignal | undefined,
  ): Promise<void> {
    const response = await this.http.send('POST', `${this.sandboxUrl(sandboxId)}/${operation}`, {
      // Idempotent by the spec: another attempt after a lost answer is safe.
      maxAttempts: 4,
      ...(signal ? { signal } : {}),
    })
    if (response.status === 200 || response.status === 204) return
    if (response.status === 404) throw this.guestGone(sandboxId, response)
    throw this.failure(operation, response)
  }

  /** A guest the control plane does not have: for the host, a sandbox that is gone. */
  private guestGone(sandboxId: string, response: JsonHttpResponse): SandboxDestroyedError {
    return new SandboxDestroyedError(sandboxId, {
      cause: { status: response.status, body: response.body },
    })
  }

  private sandboxUrl(sandboxId: string): string {
    return this.http.urlFor(`/v1/sandboxes/${encodeURIComponent(sandboxId)}`)
  }

  private snapshotUrl(ref: AgentSnapshotReference): string {
    const parts = [ref.orgId, ref.agentId, ref.version].map(encodeURIComponent)
    return this.http.urlFor(`/v1/snapshots/${parts.join('/')}`)
  }

  private failure(
    operation:
      | 'create'
      | 'delete'
      | 'describe'
      | 'list'
      | 'pause'
      | 'resume'
      | 'snapshot'
      | 'list snapshots'
      | 'describe snapshot'
      | 'delete snapshot',
    response: JsonHttpResponse,
    describeRefusedControl: (control: string) => string = (control) => control,
  ): SandboxError {
    const error = (response.body as Partial<ControlPlaneErrorBody> | undefined)?.error
    if (response.status !== 401 && response.status !== 403 && error?.code === 'control-refused') {
      return new SandboxControlRefusedError(
        describeRefusedControl(error.control ?? 'unknown'),
        BACKEND_NAME,
        error.reason ?? error.message ?? 'refused by the control plane',
        { cause: { status: response.status, body: response.body } },
      )
    }
    return this.http.statusError(operation, response)
  }
}

function parseCreateResponse(
  payload: unknown,
  sandboxId: string,
  endpoint: string,
): CreateSandboxResponseBody {
  const bad = (problem: string): never => {
    throw new SandboxTransportError(
      `control plane returned an unusable create response: ${problem}`,
      endpoint,
      {
        cause: payload,
      },
    )
  }
  if (typeof payload !== 'object' || payload === null) return bad('not a JSON object')
  const body = payload as Record<string, unknown>
  if (body.sandboxId !== sandboxId)
    bad(`sandboxId ${String(body.sandboxId)} is not the requested ${sandboxId}`)
  if (typeof body.rootDir !== 'string' || !body.rootDir.startsWith('/'))
    bad('rootDir must be an absolute path')
  return { sandboxId, rootDir: body.rootDir as string, agent: parseAgentEndpoint(body.agent, bad) }
}

function parseDescription(payload: unknown, endpoint: string): SandboxDescriptionBody {
  const bad = (problem: string): never => {
    throw new SandboxTransportError(
      `control plane returned an unusable sandbox description: ${problem}`,
      endpoint,
      { cause: payload },
    )
  }
  if (typeof payload !== 'object' || payload === null) return bad('not a JSON object')
  const body = payload as Record<string, unknown>
  if (typeof body.sandboxId !== 'string') bad('sandboxId must be a string')
  if (body.state !== 'creating' && body.state !== 'running' && body.state !== 'paused')
    bad('state must be creating, running or paused')
  const labels: Record<string, string> = {}
  if (typeof body.labels === 'object' && body.labels !== null)
    for (const [key, value] of Object.entries(body.labels))
      if (typeof value === 'string') labels[key] = value
  const createdAt = typeof body.createdAt === 'string' ? Date.parse(body.createdAt) : Number.NaN
  return {
    sandboxId: body.sandboxId as string,
    state: body.state as SandboxDescriptionBody['state'],
    labels,
    ...(typeof body.rootDir === 'string' && body.rootDir.startsWith('/')
      ? { rootDir: body.rootDir }
      : {}),
    ...(body.agent === undefined || body.agent === null
      ? {}
      : { agent: parseAgentEndpoint(body.agent, bad) }),
    ...(Number.isFinite(createdAt) ? { createdAt } : {}),
  }
}

function parseAgentEndpoint(value: unknown, bad: (problem: string) => never): SandboxAgentEndpoint {
  if (typeof value !== 'object' || value === null) return bad('agent endpoint missing')
  const agent = value as Record<string, unknown>
  const port = (input: unknown, name: string, max: number): number => {
    if (typeof input !== 'number' || !Number.isInteger(input) || input < 1 || input > max)
      bad(`agent.${name} must be an integer port`)
    return input as number
  }
  switch (agent.kind) {
    case 'unix':
      if (typeof agent.path !== 'string' || !agent.path.startsWith('/'))
        bad('agent.path must be an absolute path')
      return { kind: 'unix', path: agent.path as string }
    case 'vsock':
      if (typeof agent.udsPath !== 'string' || !agent.udsPath.startsWith('/'))
        bad('agent.udsPath must be an absolute path')
      return agent.port === undefined
        ? { kind: 'vsock', udsPath: agent.udsPath as string }
        : {
            kind: 'vsock',
            udsPath: agent.udsPath as string,
            port: port(agent.port, 'port', 0xffffffff),
          }
    case 'tls':
      if (typeof agent.host !== 'string' || agent.host.length === 0)
        bad('agent.host must be a host name')
      return {
        kind: 'tls',
        host: agent.host as string,
        port: port(agent.port, 'port', 65535),
        ...(typeof agent.servername === 'string' ? { servername: agent.servername } : {}),
      }
    case 'mtls':
      if (typeof agent.host !== 'string' || agent.host.length === 0)
        bad('agent.host must be a host name')
      if (typeof agent.sandboxId !== 'string' || agent.sandboxId.length === 0)
        bad('agent.sandboxId must name the guest for the relay')
      return {
        kind: 'mtls',
        host: agent.host as string,
        port: port(agent.port, 'port', 65535),
        sandboxId: agent.sandboxId as string,
      }
    default:
      return bad(`agent.kind ${String(agent.kind)} is not unix, vsock, tls or mtls`)
  }
}

function parseSnapshot(payload: unknown, endpoint: string): SnapshotBody {
  const bad = (problem: string): never => {
    throw new SandboxTransportError(
      `control plane returned an unusable snapshot: ${problem}`,
      endpoint,
      { cause: payload },
    )
  }
  if (typeof payload !== 'object' || payload === null) return bad('not a JSON object')
  const body = payload as Record<string, unknown>
  const ref = body.agentSnapshot as Record<string, unknown> | undefined
  if (
    typeof ref !== 'object' ||
    ref === null ||
    [ref.orgId, ref.agentId, ref.version].some((part) => typeof part !== 'string' || !part)
  )
    bad('agentSnapshot must name orgId, agentId and version')
  if (typeof body.sourceSandboxId !== 'string') bad('sourceSandboxId must be a string')
  if (typeof body.memory !== 'boolean') bad('memory must be a boolean')
  if (typeof body.sizeBytes !== 'number' || !Number.isInteger(body.sizeBytes) || body.sizeBytes < 0)
    bad('sizeBytes must be a whole number of bytes')
  if (typeof body.createdAt !== 'string' || Number.isNaN(Date.parse(body.createdAt)))
    bad('createdAt must be a date')
  const labels = body.labels
  if (
    typeof labels !== 'object' ||
    labels === null ||
    Object.values(labels).some((value) => typeof value !== 'string')
  )
    bad('labels must be an object of strings')
  return {
    agentSnapshot: {
      orgId: ref!.orgId as string,
      agentId: ref!.agentId as string,
      version: ref!.version as string,
    },
    sourceSandboxId: body.sourceSandboxId as string,
    ...(typeof body.template === 'string' ? { template: body.template } : {}),
    memory: body.memory as boolean,
    sizeBytes: body.sizeBytes as number,
    createdAt: body.createdAt as string,
    labels: labels as Record<string, string>,
  }
}
