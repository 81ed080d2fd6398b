import {
  SandboxAbortedError,
  SandboxBackendUnavailableError,
  SandboxControlRefusedError,
  type SandboxError,
  SandboxOperationError,
  SandboxTransportError,
  type TlsClientMaterial,
} from '@cordon/core'
import { fetchBearerToken } from '@cordon/core/backend'
import { Agent, request } from 'undici'
import type {
  ControlPlaneErrorBody,
  CreateSandboxRequestBody,
  CreateSandboxResponseBody,
  SandboxAgentEndpoint,
} from './control-plane-types.js'

export const BACKEND_NAME = 'microvm:self-hosted'

export interface ControlPlaneClientOptions {
  readonly endpoint: string
  /** Called before every request, so a long-lived backend follows token rotation. */
  readonly getToken: () => Promise<string>
  /** Client certificate (and CA) for a control plane that requires mutual TLS. */
  readonly tls?: TlsClientMaterial
}

/**
 * The backend's client of the orchestrator's control plane (openapi.yaml).
 * Translates every failure into a cordon error at this boundary, keeping the
 * HTTP or network error as `cause`.
 */
export class ControlPlaneClient {
  private readonly base: string
  private readonly dispatcher: Agent

  constructor(private readonly options: ControlPlaneClientOptions) {
    this.base = options.endpoint.replace(/\/+$/, '')
    const tls = options.tls
    this.dispatcher = new Agent({
      connect: tls
        ? {
            cert: tls.cert,
            key: tls.key,
            ...(tls.ca ? { ca: tls.ca } : {}),
            ...(tls.servername ? { servername: tls.servername } : {}),
          }
        : {},
    })
  }

  async createSandbox(
    body: CreateSandboxRequestBody,
    signal: AbortSignal | undefined,
    describeRefusedControl: (control: string) => string = (control) => control,
  ): Promise<CreateSandboxResponseBody> {
    const { status, payload } = await this.call('POST', '/v1/sandboxes', body, signal)
    if (status !== 201 && status !== 200)
      throw this.failure('create', status, payload, describeRefusedControl)
    return parseCreateResponse(payload, body.sandboxId, this.base)
  }

  /** Deletes a guest. A guest the control plane does not know is already gone. */
  async deleteSandbox(sandboxId: string, signal?: AbortSignal): Promise<void> {
    const { status, payload } = await this.call(
      'DELETE',
      `/v1/sandboxes/${encodeURIComponent(sandboxId)}`,
      undefined,
      signal,
    )
    if (status === 204 || status === 200 || status === 404) return
    throw this.failure('delete', status, payload)
  }

  /**
   * Whether a guest is gone: `evicted` when the control plane no longer has
   * it (removed by the orchestrator, a host failure, an operator), undefined
   * while it exists.
   */
  async whyGone(sandboxId: string, signal?: AbortSignal): Promise<'evicted' | undefined> {
    const { status, payload } = await this.call(
      'GET',
      `/v1/sandboxes/${encodeURIComponent(sandboxId)}`,
      undefined,
      signal,
    )
    if (status === 404) return 'evicted'
    if (status === 200) return undefined
    throw this.failure('describe', status, payload)
  }

  async close(): Promise<void> {
    await this.dispatcher.close()
  }

  private async call(
    method: 'GET' | 'POST' | 'DELETE',
    path: string,
    body: unknown,
    signal: AbortSignal | undefined,
  ): Promise<{ status: number; payload: unknown }> {
    if (signal?.aborted)
      throw new SandboxAbortedError(`control-plane ${method}`, { cause: signal.reason })
    const token = await fetchBearerToken(
      this.options.getToken,
      BACKEND_NAME,
      'getToken',
      'the control plane',
    )
    const url = `${this.base}${path}`
    try {
      const response = await request(url, {
        method,
        dispatcher: this.dispatcher,
        headers: {
          authorization: `Bearer ${token}`,
          accept: 'application/json',
          ...(body === undefined ? {} : { 'content-type': 'application/json' }),
        },
        ...(body === undefined ? {} : { body: JSON.stringify(body) }),
        ...(signal ? { signal } : {}),
      })
      const text = await response.body.text()
      let payload: unknown
      try {
        payload = text ? JSON.parse(text) : undefined
      } catch {
        payload = { error: { code: 'bad-response', message: text.slice(0, 500) } }
      }
      return { status: response.statusCode, payload }
    } catch (error) {
      if (signal?.aborted)
        throw new SandboxAbortedError(`control-plane ${method}`, { cause: signal.reason })
      throw new SandboxTransportError(
        `control plane ${method} ${url} failed: ${(error as Error).message}`,
        url,
        { cause: error },
      )
    }
  }

  private failure(
    operation: 'create' | 'delete' | 'describe',
    status: number,
    payload: unknown,
    describeRefusedControl: (control: string) => string = (control) => control,
  ): SandboxError {
    const error = (payload as Partial<ControlPlaneErrorBody> | undefined)?.error
    const message = `${error?.code ?? 'error'}: ${error?.message ?? 'no detail'} (HTTP ${status})`
    const cause = { status, body: payload }
    if (status === 401 || status === 403) {
      return new SandboxBackendUnavailableError(
        BACKEND_NAME,
        `the control plane refused the bearer token: ${message}`,
        { cause },
      )
    }
    if (error?.code === 'control-refused') {
      return new SandboxControlRefusedError(
        describeRefusedControl(error.control ?? 'unknown'),
        BACKEND_NAME,
        error.reason ?? error.message ?? 'refused by the control plane',
        { cause },
      )
    }
    if (status === 429 || status >= 500) {
      return new SandboxBackendUnavailableError(
        BACKEND_NAME,
        `control plane could not ${operation} the sandbox: ${message}`,
        { cause },
      )
    }
    return new SandboxOperationError(`control-plane ${operation}`, message, { cause })
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
