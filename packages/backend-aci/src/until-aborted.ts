import { SandboxAbortedError } from '@cordon/core'

/**
 * Waits for a shared promise on behalf of one caller: rejects with
 * `SandboxAbortedError` when that caller's signal fires, leaving the promise
 * itself (and everyone else waiting on it) alone.
 */
export function untilAborted<T>(
  shared: Promise<T>,
  signal: AbortSignal,
  operation: string,
): Promise<T> {
  if (signal.aborted)
    return Promise.reject(new SandboxAbortedError(operation, { cause: signal.reason }))
  return new Promise<T>((resolve, reject) => {
    const onAbort = (): void => reject(new SandboxAbortedError(operation, { cause: signal.reason }))
    signal.addEventListener('abort', onAbort, { once: true })
    shared.then(resolve, reject).finally(() => signal.removeEventListener('abort', onAbort))
  })
}
