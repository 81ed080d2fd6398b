import { SandboxAbortedError } from './errors.js'

/** How long failure cleanup may run before it is abandoned, unless told otherwise. */
export const DEFAULT_CLEANUP_GRACE_MS = 10_000

export interface DeadlineOptions<T> {
  /** Budget for the operation. `undefined` or `Infinity` means only the signal can end it. */
  readonly timeoutMs?: number
  /** The caller's signal. Its abort ends the operation with {@link SandboxAbortedError}. */
  readonly signal?: AbortSignal
  /** What to call the operation in errors. */
  readonly operation: string
  /** Builds the error thrown when the budget runs out. */
  readonly onTimeout: () => Error
  /**
   * Runs once if the operation fails, times out or is aborted: removes whatever
   * the operation made. It is given at most `cleanupGraceMs`; a cleanup that
   * throws or overruns is reported through `onCleanupError` and never masks the
   * original failure.
   */
  readonly cleanup?: () => Promise<void>
  /**
   * Disposes of a result that arrived after the deadline or abort had already
   * failed the call (for example a container that finished starting too late).
   * The late result is never handed to the caller.
   */
  readonly disposeLate?: (late: T) => Promise<void>
  readonly cleanupGraceMs?: number
  /**
   * After a timeout or abort, how long the cleanup waits for the operation to
   * settle before it runs (default half the cleanup grace). An engine call in
   * flight when the deadline fell (a container being created) then lands
   * first, and the cleanup finds and removes what it made; an operation that
   * does not settle in time is cleaned up after anyway.
   */
  readonly settleMs?: number
  readonly onCleanupError?: (error: unknown) => void
}

/**
 * Runs `operation` against a deadline and the caller's abort signal.
 *
 * The operation receives a signal that fires on expiry, on the caller's abort,
 * or never; it should pass it to everything it awaits, but for a call that
 * makes something on a server (cut off on the client, such a call can still
 * land there after the cleanup looked): that one is left to finish and the
 * signal looked at once it returns. Whichever comes first decides the
 * outcome: a result that arrives after expiry or abort is refused (and given
 * to `disposeLate`), and failure cleanup runs once the operation settled (or
 * `settleMs` passed), with a bounded grace so a wedged cleanup cannot hang
 * the caller.
 */
export async function withDeadline<T>(
  operation: (signal: AbortSignal) => Promise<T>,
  options: DeadlineOptions<T>,
): Promise<T> {
  const { signal, timeoutMs } = options
  if (signal?.aborted) {
    throw new SandboxAbortedError(options.operation, { cause: signal.reason })
  }
  const controller = new AbortController()
  let timer: ReturnType<typeof setTimeout> | undefined
  let removeAbortListener = (): void => {}

  const expiry = new Promise<never>((_, reject) => {
    if (timeoutMs !== undefined && Number.isFinite(timeoutMs)) {
      timer = setTimeout(
        () => {
          const error = options.onTimeout()
          controller.abort(error)
          reject(error)
        },
        Math.max(0, timeoutMs),
      )
    }
    if (signal) {
      const onAbort = (): void => {
        const error = new SandboxAbortedError(options.operation, { cause: signal.reason })
        controller.abort(error)
        reject(error)
      }
      signal.addEventListener('abort', onAbort, { once: true })
      removeAbortListener = () => signal.removeEventListener('abort', onAbort)
    }
  })

  const running = Promise.resolve().then(() => operation(controller.signal))
  // A rejection that lands after the deadline already decided must not surface
  // as an unhandled rejection; the race below still observes it when it counts.
  running.catch(() => {})
  try {
    const result = await Promise.race([running, expiry])
    return result
  } catch (error) {
    if (options.disposeLate) {
      const dispose = options.disposeLate
      // The operation may still finish; its result must not leak.
      running.then(
        (late) => runBounded(() => dispose(late), options),
        () => {},
      )
    }
    if (options.cleanup) {
      const settleMs = options.settleMs ?? (options.cleanupGraceMs ?? DEFAULT_CLEANUP_GRACE_MS) / 2
      await settled(running, settleMs)
      await runBounded(options.cleanup, options)
    }
    throw error
  } finally {
    if (timer) clearTimeout(timer)
    removeAbortListener()
  }
}

/** Resolves when `operation` settles, or after `ms`, whichever is first. */
async function settled(operation: Promise<unknown>, ms: number): Promise<void> {
  let timer: ReturnType<typeof setTimeout> | undefined
  await Promise.race([
    operation.then(
      () => {},
      () => {},
    ),
    new Promise<void>((resolve) => {
      timer = setTimeout(resolve, ms)
    }),
  ])
  clearTimeout(timer)
}

async function runBounded(
  task: () => Promise<void>,
  options: Pick<DeadlineOptions<unknown>, 'cleanupGraceMs' | 'onCleanupError'>,
): Promise<void> {
  const graceMs = options.cleanupGraceMs ?? DEFAULT_CLEANUP_GRACE_MS
  let timer: ReturnType<typeof setTimeout> | undefined
  try {
    await Promise.race([
      Promise.resolve().then(task),
      new Promise<void>((_, reject) => {
        timer = setTimeout(
          () => reject(new Error(`cleanup did not finish within ${graceMs} ms`)),
          graceMs,
        )
      }),
    ])
  } catch (error) {
    options.onCleanupError?.(error)
  } finally {
    if (timer) clearTimeout(timer)
  }
}

/** A promise that resolves after `ms`, or rejects with {@link SandboxAbortedError} on abort. */
export function sleep(ms: number, signal?: AbortSignal, operation = 'sleep'): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal?.aborted) {
      reject(new SandboxAbortedError(operation, { cause: signal.reason }))
      return
    }
    const timer = setTimeout(() => {
      signal?.removeEventListener('abort', onAbort)
      resolve()
    }, ms)
    const onAbort = (): void => {
      clearTimeout(timer)
      reject(new SandboxAbortedError(operation, { cause: signal?.reason }))
    }
    signal?.addEventListener('abort', onAbort, { once: true })
  })
}
