import { Agent, request } from 'undici'
import { fetchBearerToken } from './bearer-token.js'
import type { TlsClientMaterial } from './config.js'
import { sleep } from './deadline.js'
import {
  SandboxAbortedError,
  SandboxBackendUnavailableError,
  type SandboxError,
  SandboxOperationError,
  SandboxTransportError,
  throwIfAborted,
} from './errors.js'
import { isTransientStatus, retryDelayMs } from './http-retry.js'

export interface JsonHttpClientOptions {
  /** The backend this client serves (`tier:runtime`), named in its errors. */
  readonly backend: string
  /** Base URL of the service; {@link JsonHttpClient.urlFor} appends paths to it. */
  readonly endpoint: string
  /**
   * The host's token closure, called before every request (and every retry),
   * so a long-lived backend follows token rotation.
   */
  readonly getToken: () => Promise<string>
  /** The closure's name in the backend's config (`getToken`, ...), for errors. */
  readonly tokenClosureName: string
  /** Who the service is, for errors: e.g. `the control plane`. */
  readonly audience: string
  /** Client certificate (and CA) for a service that requires mutual TLS. */
  readonly tls?: TlsClientMaterial
  /** Budgets of one attempt's connect, response headers and body (undici's defaults otherwise). */
  readonly timeouts?: {
    readonly connectMs?: number
    readonly headersMs?: number
    readonly bodyMs?: number
  }
  /** Response headers the backend reads (lower case); `retry-after` is always kept. */
  readonly responseHeaders?: readonly string[]
}

export type JsonHttpMethod = 'GET' | 'PUT' | 'POST' | 'DELETE'

export interface JsonHttpResponse {
  readonly status: number
  readonly headers: Readonly<Record<string, string | undefined>>
  /**
   * The parsed body: undefined when empty; a body that is not JSON becomes
   * `{ error: { code: 'InvalidResponse', message } }` (its first 300
   * characters), the error shape both ARM and cordon's control plane use.
   */
  readonly body: unknown
  readonly method: JsonHttpMethod
  readonly url: string
}

export interface JsonHttpSendOptions {
  readonly body?: unknown
  readonly signal?: AbortSignal
  /**
   * Attempts before a throttled or failing request gives up (the signal may
   * end it sooner). Default: 6 for GET, PUT and DELETE, which are idempotent,
   * so another attempt after a lost answer is safe; 1 for POST.
   */
  readonly maxAttempts?: number
  /**
   * Let a request that is already on the wire finish even if the signal
   * fires: once the service may have acted on it, the caller needs its
   * answer (e.g. to know whether there is something to delete).
   */
  readonly finishInFlight?: boolean
  /** Called with each attempt's promise (for awaiting one that is still on the wire). */
  readonly onAttempt?: (attempt: Promise<unknown>) => void
  /** Called with every throttled or failing answer, or transport error, before it is retried. */
  readonly onRetry?: (failure: JsonHttpResponse | SandboxTransportError) => void
}

const DEFAULT_MAX_ATTEMPTS = 6
const IDEMPOTENT = new Set<JsonHttpMethod>(['GET', 'PUT', 'DELETE'])

/**
 * The one HTTP client of the backends that drive a remote control plane
 * (a cloud's resource API, a guest orchestrator): JSON in and out over undici,
 * a fresh bearer token from the host's closure on every attempt, throttling
 * and transient failures retried with the server's `Retry-After` or a
 * back-off (http-retry.ts), every wait and request ended by the caller's
 * signal, and every failure a cordon error at this boundary, with the HTTP
 * or network error kept as `cause`.
 *
 * `send` resolves with any answer the service gave (the caller decides what
 * its statuses mean); {@link statusError} is the shared reading of one that
 * was not a success. What is particular to one service (ARM's long-running
 * operations, a refusal code of the orchestrator) stays in its backend.
 */
export class JsonHttpClient {
  private readonly base: string
  private readonly dispatcher: Agent
  private readonly keptHeaders: readonly string[]

  constructor(private readonly options: JsonHttpClientOptions) {
    this.base = options.endpoint.replace(/\/+$/, '')
    const tls = options.tls
    const timeouts = options.timeouts ?? {}
    this.dispatcher = new Agent({
      ...(timeouts.headersMs === undefined ? {} : { headersTimeout: timeouts.headersMs }),
      ...(timeouts.bodyMs === undefined ? {} : { bodyTimeout: timeouts.bodyMs }),
      connect: {
        ...(timeouts.connectMs === undefined ? {} : { timeout: timeouts.connectMs }),
        ...(tls
          ? {
              cert: tls.cert,
              key: tls.key,
              ...(tls.ca ? { ca: tls.ca } : {}),
              ...(tls.servername ? { servername: tls.servername } : {}),
            }
          : {}),
      },
    })
    this.keptHeaders = [...new Set(['retry-after', ...(options.responseHeaders ?? [])])]
  }

  /** The service's URL for `path` (which starts with `/`). */
  urlFor(path: string): string {
    return `${this.base}${path}`
  }

  async send(
    method: JsonHttpMethod,
    url: string,
    options: JsonHttpSendOptions = {},
  ): Promise<JsonHttpResponse> {
    const maxAttempts = options.maxAttempts ?? (IDEMPOTENT.has(method) ? DEFAULT_MAX_ATTEMPTS : 1)
    for (let attempt = 1; ; attempt++) {
      throwIfAborted(options.signal, method)
      const sending = this.attempt(method, url, options)
      options.onAttempt?.(sending)
      let response: JsonHttpResponse
      try {
        response = await sending
      } catch (error) {
        // Aborts and token failures are final; only transport failures are worth another attempt.
        if (!SandboxTransportError.isInstance(error) || attempt >= maxAttempts) throw error
        options.onRetry?.(error)
        await sleep(retryDelayMs(attempt, undefined), options.signal, method)
        continue
      }
      throwIfAborted(options.signal, method)
      if (!isTransientStatus(response.status) || attempt >= maxAttempts) return response
      options.onRetry?.(response)
      await sleep(retryDelayMs(attempt, response.headers['retry-after']), options.signal, method)
    }
  }

  /**
   * The cordon error for an answer that was not a success: 401 and 403 mean
   * the service refused the token (the backend cannot be used until the
   * host's identity is fixed); throttling and server errors, that it is
   * unavailable now; anything else, that the operation failed. Backends
   * check their own special answers first (a conflict, a refused control).
   */
  statusError(
    operation: string,
    response: JsonHttpResponse,
    cause: unknown = { status: response.status, body: response.body },
  ): SandboxError {
    const { audience, backend, tokenClosureName } = this.options
    const detail = `${errorDetail(response)} (HTTP ${response.status})`
    if (response.status === 401 || response.status === 403) {
      return new SandboxBackendUnavailableError(
        backend,
        `${audience} refused the bearer token from ${tokenClosureName}(): ${detail}`,
        { cause },
      )
    }
    if (response.status >= 500 || isTransientStatus(response.status)) {
      return new SandboxBackendUnavailableError(
        backend,
        `${audience} could not serve the ${operation} request: ${detail}`,
        { cause },
      )
    }
    return new SandboxOperationError(operation, detail, { cause })
  }

  async close(): Promise<void> {
    await this.dispatcher.close()
  }

  private async attempt(
    method: JsonHttpMethod,
    url: string,
    options: JsonHttpSendOptions,
  ): Promise<JsonHttpResponse> {
    const { backend, getToken, tokenClosureName, audience } = this.options
    const token = await fetchBearerToken(getToken, backend, tokenClosureName, audience)
    const signal = options.finishInFlight ? undefined : options.signal
    try {
      const response = await request(url, {
        method,
        dispatcher: this.dispatcher,
        headers: {
          authorization: `Bearer ${token}`,
          accept: 'application/json',
          ...(options.body === undefined ? {} : { 'content-type': 'application/json' }),
        },
        ...(options.body === undefined ? {} : { body: JSON.stringify(options.body) }),
        ...(signal ? { signal } : {}),
      })
      const text = await response.body.text()
      const headers: Record<string, string | undefined> = {}
      for (const name of this.keptHeaders) {
        const value = response.headers[name]
        headers[name] = Array.isArray(value) ? value[0] : value
      }
      let body: unknown
      try {
        body = text ? JSON.parse(text) : undefined
      } catch {
        body = { error: { code: 'InvalidResponse', message: text.slice(0, 300) } }
      }
      return { status: response.statusCode, headers, body, method, url }
    } catch (error) {
      if (options.signal?.aborted)
        throw new SandboxAbortedError(method, { cause: options.signal.reason })
      const endpoint = withoutQuery(url)
      throw new SandboxTransportError(
        `${method} ${endpoint} failed: ${(error as Error).message}`,
        endpoint,
        { cause: error },
      )
    }
  }
}

/** `code: message` from the `{ error: { code, message } }` body ARM and cordon's control plane answer with. */
function errorDetail(response: JsonHttpResponse): string {
  const error = (response.body as { error?: { code?: unknown; message?: unknown } } | undefined)
    ?.error
  const code = typeof error?.code === 'string' ? error.code : `HTTP${response.status}`
  const message = typeof error?.message === 'string' ? error.message : 'no detail'
  return `${code}: ${message}`
}

/** A URL without its query (which may carry an api-version or a signature), for errors. */
function withoutQuery(url: string): string {
  const index = url.indexOf('?')
  return index === -1 ? url : url.slice(0, index)
}
