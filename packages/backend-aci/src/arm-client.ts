import {
  SandboxAbortedError,
  SandboxBackendUnavailableError,
  type SandboxError,
  SandboxOperationError,
  SandboxTransportError,
} from '@cordon/core'
import { fetchBearerToken, sleep } from '@cordon/core/backend'
import { Agent, request } from 'undici'
import { BACKEND_NAME } from './aci-defaults.js'
import { ArmAuthorizationError, ArmConflictError, ArmRequestFailure } from './arm-errors.js'
import { isTransientStatus, retryDelayMs } from './arm-retry.js'

export interface ArmClientOptions {
  /** Base URL of Azure Resource Manager (or of a stand-in). */
  readonly endpoint: string
  /** Called before every request, so a long-lived backend follows token rotation. */
  readonly getToken: () => Promise<string>
}

export interface ArmResponse {
  readonly status: number
  readonly headers: Readonly<Record<string, string | undefined>>
  readonly body: unknown
  readonly method: string
  readonly url: string
}

export interface ArmSendOptions {
  readonly body?: unknown
  readonly signal?: AbortSignal
  /** Attempts before a throttled or failing request gives up (default 6; the signal may end it sooner). */
  readonly maxAttempts?: number
  /**
   * Let a request that is already on the wire finish even if the signal fires.
   * A claim's PUT uses this: once ARM may have accepted it, the caller needs
   * its answer to know whether there is a group to delete.
   */
  readonly finishInFlight?: boolean
  /** Called with each attempt's promise (for awaiting one that is still on the wire). */
  readonly onAttempt?: (attempt: Promise<unknown>) => void
  /** Called with every throttled or transient failure before it is retried. */
  readonly onTransient?: (failure: ArmRequestFailure) => void
}

const HEADERS_KEPT = ['azure-asyncoperation', 'location', 'retry-after', 'x-ms-request-id'] as const

/**
 * The backend's HTTP client of Azure Resource Manager. Every request carries
 * a fresh bearer token and the api-version; throttling (429) and transient
 * server or network failures are retried with ARM's `Retry-After` or a
 * back-off, within the caller's signal. ARM's idempotent verbs (GET, PUT of a
 * named resource, DELETE) are the only ones used, so a retry after a lost
 * answer is safe.
 */
export class ArmClient {
  private readonly base: string
  private readonly dispatcher = new Agent({
    headersTimeout: 30_000,
    bodyTimeout: 30_000,
    connect: { timeout: 10_000 },
  })

  constructor(private readonly options: ArmClientOptions) {
    this.base = options.endpoint.replace(/\/+$/, '')
  }

  /** URL of a resource id (`/subscriptions/...`) with its api-version. */
  resourceUrl(resourceId: string, apiVersion: string): string {
    return `${this.base}${resourceId}?api-version=${encodeURIComponent(apiVersion)}`
  }

  async send(
    method: 'GET' | 'PUT' | 'DELETE',
    url: string,
    options: ArmSendOptions = {},
  ): Promise<ArmResponse> {
    const maxAttempts = options.maxAttempts ?? 6
    for (let attempt = 1; ; attempt++) {
      throwIfAborted(options.signal, method)
      const sending = this.attempt(method, url, options)
      options.onAttempt?.(sending)
      let response: ArmResponse
      try {
        response = await sending
      } catch (error) {
        if (!isRetryableSendError(error) || attempt >= maxAttempts) throw error
        const failure = new ArmRequestFailure({
          status: 0,
          code: 'NetworkError',
          message: (error as Error).message,
          requestId: undefined,
          method,
          url: withoutQuery(url),
        })
        options.onTransient?.(failure)
        await sleep(retryDelayMs(attempt, undefined), options.signal, method)
        continue
      }
      throwIfAborted(options.signal, method)
      if (!isTransientStatus(response.status) || attempt >= maxAttempts) return response
      options.onTransient?.(failureOf(response))
      await sleep(retryDelayMs(attempt, response.headers['retry-after']), options.signal, method)
    }
  }

  /**
   * The cordon error for a response that was not a success: 401/403 and 409
   * have their own types; throttling and server errors that outlasted the
   * retries mean Azure is unavailable; anything else is an operation failure.
   */
  failure(operation: string, response: ArmResponse): SandboxError {
    const failure = failureOf(response)
    if (response.status === 401 || response.status === 403)
      return new ArmAuthorizationError(failure)
    if (response.status === 409) return new ArmConflictError(operation, failure)
    if (isTransientStatus(response.status)) {
      return new SandboxBackendUnavailableError(
        BACKEND_NAME,
        `Azure Resource Manager kept failing the ${operation} request (HTTP ${response.status} ${failure.code})`,
        { cause: failure },
      )
    }
    return new SandboxOperationError(
      operation,
      `${failure.code}: ${failure.message} (HTTP ${response.status})`,
      { cause: failure },
    )
  }

  async close(): Promise<void> {
    await this.dispatcher.close()
  }

  private async attempt(
    method: string,
    url: string,
    options: ArmSendOptions,
  ): Promise<ArmResponse> {
    const token = await fetchBearerToken(
      this.options.getToken,
      BACKEND_NAME,
      'getArmToken',
      'Azure Resource Manager',
    )
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
      for (const name of HEADERS_KEPT) {
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
      throw new SandboxTransportError(
        `${method} ${withoutQuery(url)} failed: ${(error as Error).message}`,
        withoutQuery(url),
        {
          cause: error,
        },
      )
    }
  }
}

/** The request-level facts of a failed response (never its body). */
export function failureOf(response: ArmResponse): ArmRequestFailure {
  const error = (response.body as { error?: { code?: unknown; message?: unknown } } | undefined)
    ?.error
  return new ArmRequestFailure({
    status: response.status,
    code: typeof error?.code === 'string' ? error.code : `HTTP${response.status}`,
    message: typeof error?.message === 'string' ? error.message : 'no detail',
    requestId: response.headers['x-ms-request-id'],
    method: response.method,
    url: withoutQuery(response.url),
  })
}

function withoutQuery(url: string): string {
  const index = url.indexOf('?')
  return index === -1 ? url : url.slice(0, index)
}

function throwIfAborted(signal: AbortSignal | undefined, operation: string): void {
  if (signal?.aborted) throw new SandboxAbortedError(operation, { cause: signal.reason })
}

/** Aborts and token failures are final; only transport failures are worth another attempt. */
function isRetryableSendError(error: unknown): boolean {
  return SandboxTransportError.isInstance(error)
}
