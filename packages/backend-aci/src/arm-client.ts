import { type SandboxError, SandboxTransportError } from '@cordon/core'
import { JsonHttpClient, type JsonHttpResponse } from '@cordon/core/backend'
import { BACKEND_NAME } from './aci-defaults.js'
import { ArmAuthorizationError, ArmConflictError, ArmRequestFailure } from './arm-errors.js'

export interface ArmClientOptions {
  /** Base URL of Azure Resource Manager (or of a stand-in). */
  readonly endpoint: string
  /** Called before every request, so a long-lived backend follows token rotation. */
  readonly getToken: () => Promise<string>
}

export type ArmResponse = JsonHttpResponse

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

/**
 * The backend's client of Azure Resource Manager, on the kit's
 * `JsonHttpClient` (a fresh bearer token per request, throttling and
 * transient failures retried with ARM's `Retry-After` or a back-off, within
 * the caller's signal). What is ARM's stays here: the api-version, the
 * headers its long-running operations and support cases need, and its
 * errors (`ArmRequestFailure`, 401/403 and 409). ARM's idempotent verbs
 * (GET, PUT of a named resource, DELETE) are the only ones used, so a retry
 * after a lost answer is safe.
 */
export class ArmClient {
  private readonly http: JsonHttpClient

  constructor(options: ArmClientOptions) {
    this.http = new JsonHttpClient({
      backend: BACKEND_NAME,
      endpoint: options.endpoint,
      getToken: options.getToken,
      tokenClosureName: 'getArmToken',
      audience: 'Azure Resource Manager',
      timeouts: { connectMs: 10_000, headersMs: 30_000, bodyMs: 30_000 },
      responseHeaders: ['azure-asyncoperation', 'location', 'x-ms-request-id'],
    })
  }

  /** URL of a resource id (`/subscriptions/...`) with its api-version. */
  resourceUrl(resourceId: string, apiVersion: string): string {
    return this.http.urlFor(`${resourceId}?api-version=${encodeURIComponent(apiVersion)}`)
  }

  send(
    method: 'GET' | 'PUT' | 'DELETE',
    url: string,
    options: ArmSendOptions = {},
  ): Promise<ArmResponse> {
    const { onTransient, ...rest } = options
    return this.http.send(method, url, {
      ...rest,
      ...(onTransient
        ? {
            onRetry: (failure) =>
              onTransient(
                SandboxTransportError.isInstance(failure)
                  ? networkFailureOf(method, url, failure)
                  : failureOf(failure),
              ),
          }
        : {}),
    })
  }

  /**
   * The cordon error for a response that was not a success: 401/403 and 409
   * have ARM's own types; the rest is the kit's reading of the status, with
   * ARM's facts (`ArmRequestFailure`) as its cause.
   */
  failure(operation: string, response: ArmResponse): SandboxError {
    const failure = failureOf(response)
    if (response.status === 401 || response.status === 403)
      return new ArmAuthorizationError(failure)
    if (response.status === 409) return new ArmConflictError(operation, failure)
    return this.http.statusError(operation, response, failure)
  }

  async close(): Promise<void> {
    await this.http.close()
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

function networkFailureOf(
  method: string,
  url: string,
  error: SandboxTransportError,
): ArmRequestFailure {
  return new ArmRequestFailure({
    status: 0,
    code: 'NetworkError',
    message: error.message,
    requestId: undefined,
    method,
    url: withoutQuery(url),
  })
}

function withoutQuery(url: string): string {
  return url.split('?')[0]!
}
