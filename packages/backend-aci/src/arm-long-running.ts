import { SandboxOperationError } from '@cordon/core'
import { parseRetryAfter, sleep } from '@cordon/core/backend'
import type { ArmClient, ArmResponse, ArmSendOptions } from './arm-client.js'
import { ArmRequestFailure } from './arm-errors.js'

/** Poll interval when ARM gives no `Retry-After`. */
const DEFAULT_POLL_MS = 1_000
/** Never poll faster than this, even on `Retry-After: 0`. */
const MIN_POLL_MS = 100

export interface LongRunningOptions {
  /** The resource the operation is about, for polling its `provisioningState` when ARM names no monitor. */
  readonly resourceUrl: string
  /** Name of the operation in errors (`claim`, `delete`). */
  readonly operation: string
  readonly signal?: AbortSignal
  readonly onTransient?: ArmSendOptions['onTransient']
  readonly maxAttempts?: number
}

/**
 * Follows one of ARM's long-running operations to its end, from the first
 * answer of the PUT or DELETE that started it, by ARM's rules:
 *
 * 1. `Azure-AsyncOperation`: poll that URL; its `status` ends `Succeeded`,
 *    `Failed` or `Canceled`.
 * 2. Otherwise `Location`: poll it; 202 means still running, 200/201/204
 *    done, an error status the operation's failure.
 * 3. Otherwise the resource's own `provisioningState`, from the answer or by
 *    polling the resource.
 *
 * Every poll waits for the latest `Retry-After`. Resolves when the operation
 * succeeded; a failed or canceled one rejects with `SandboxOperationError`
 * carrying ARM's error code as `cause`.
 */
export async function followLongRunningOperation(
  client: ArmClient,
  initial: ArmResponse,
  options: LongRunningOptions,
): Promise<void> {
  const send = (url: string): Promise<ArmResponse> =>
    client.send('GET', url, {
      ...(options.signal ? { signal: options.signal } : {}),
      ...(options.onTransient ? { onTransient: options.onTransient } : {}),
      ...(options.maxAttempts === undefined ? {} : { maxAttempts: options.maxAttempts }),
    })
  const wait = (response: ArmResponse): Promise<void> =>
    sleep(
      Math.max(MIN_POLL_MS, parseRetryAfter(response.headers['retry-after']) ?? DEFAULT_POLL_MS),
      options.signal,
      options.operation,
    )

  const asyncOperation = initial.headers['azure-asyncoperation']
  if (asyncOperation) {
    let last = initial
    for (;;) {
      await wait(last)
      last = await send(asyncOperation)
      if (last.status !== 200) throw client.failure(options.operation, last)
      const document = last.body as
        | { status?: unknown; error?: { code?: unknown; message?: unknown } }
        | undefined
      const status = typeof document?.status === 'string' ? document.status : ''
      if (/^succeeded$/i.test(status)) return
      if (/^(failed|canceled|cancelled)$/i.test(status))
        throw operationFailed(options.operation, last, status, document?.error)
    }
  }

  const location = initial.headers.location
  if (location && initial.status === 202) {
    let last = initial
    for (;;) {
      await wait(last)
      last = await send(location)
      if (last.status === 202) continue
      if (last.status === 200 || last.status === 201 || last.status === 204) return
      throw client.failure(options.operation, last)
    }
  }

  let last = initial
  for (;;) {
    const state = provisioningStateOf(last.body)
    if (state === undefined || /^succeeded$/i.test(state)) return
    if (/^(failed|canceled|cancelled)$/i.test(state)) {
      throw operationFailed(
        options.operation,
        last,
        state,
        (last.body as { error?: { code?: unknown; message?: unknown } })?.error,
      )
    }
    await wait(last)
    last = await send(options.resourceUrl)
    if (last.status !== 200) throw client.failure(options.operation, last)
  }
}

export function provisioningStateOf(body: unknown): string | undefined {
  const state = (body as { properties?: { provisioningState?: unknown } } | undefined)?.properties
    ?.provisioningState
  return typeof state === 'string' ? state : undefined
}

function operationFailed(
  operation: string,
  response: ArmResponse,
  status: string,
  error: { code?: unknown; message?: unknown } | undefined,
): SandboxOperationError {
  const code = typeof error?.code === 'string' ? error.code : status
  const message =
    typeof error?.message === 'string' ? error.message : `the operation ended ${status}`
  return new SandboxOperationError(operation, `${code}: ${message}`, {
    cause: new ArmRequestFailure({
      status: response.status,
      code,
      message,
      requestId: response.headers['x-ms-request-id'],
      method: response.method,
      url: response.url.split('?')[0]!,
    }),
  })
}
