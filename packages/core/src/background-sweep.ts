import { timeLimit } from './time-limit.js'

/**
 * The sweep a remote backend runs in the background of its first create,
 * connect or list: removing the detached sandboxes past their end time that
 * no host will come back for.
 */
export type BackgroundSweep = {
  /**
   * Starts the sweep unless one is running or one has succeeded. A failed
   * sweep (a control plane that was down, slow or refused one removal) is
   * started again by the next call, so one bad moment does not leave ended
   * sandboxes behind for the rest of the backend's life. Never throws and
   * never waits: the caller's create, connect or list must not depend on it.
   */
  run(): void
  /** Aborts a running sweep and waits for it to end; `run()` does nothing afterwards. */
  stop(): Promise<void>
}

/**
 * A {@link BackgroundSweep} of `sweep`, each run given a signal that aborts
 * on `stop()` or after `timeoutMs`.
 */
export function backgroundSweep(
  sweep: (signal: AbortSignal) => Promise<unknown>,
  timeoutMs: number,
): BackgroundSweep {
  const stopped = new AbortController()
  let running: Promise<void> | undefined
  let done = false
  return {
    run() {
      if (done || running || stopped.signal.aborted) return
      running = sweep(timeLimit(timeoutMs, stopped.signal)).then(
        () => {
          done = true
          running = undefined
        },
        () => {
          running = undefined
        },
      )
    },
    async stop() {
      stopped.abort()
      await running
    },
  }
}

/**
 * Removes every item, going on past one that fails so that it cannot keep
 * the others from being removed; resolves with the names removed. When any
 * failed, rejects after trying them all: with that failure when one did,
 * with an `AggregateError` of them (each named) when several did.
 */
export async function removeEach<T>(
  items: readonly T[],
  nameOf: (item: T) => string,
  remove: (item: T) => Promise<void>,
): Promise<string[]> {
  const removed: string[] = []
  const failures: { name: string; error: unknown }[] = []
  for (const item of items) {
    try {
      await remove(item)
      removed.push(nameOf(item))
    } catch (error) {
      failures.push({ name: nameOf(item), error })
    }
  }
  if (failures.length === 1) throw failures[0]!.error
  if (failures.length > 1)
    throw new AggregateError(
      failures.map((failure) => failure.error),
      `${failures.length} of ${items.length} could not be removed: ${failures
        .map(({ name, error }) => `${name} (${(error as Error)?.message ?? String(error)})`)
        .join('; ')}`,
    )
  return removed
}
