import { setTimeout as sleep } from 'node:timers/promises'

/**
 * The engine's lag behind an end. Docker learns that an exec or a container
 * ended from an event it handles on its own time: on a loaded machine its
 * inspect still says "running" for a moment after the process is gone, while
 * other signs (an attach stream's end, a failed resize, a dropped channel)
 * have already come. Every reader of such an end asks through here, so none
 * of them takes that moment for the answer.
 *
 * Asks `ask` until `running` says no or `forMs` has passed, `everyMs` apart,
 * and gives the last answer. An `ask` that throws ends it with that error.
 */
export async function askUntilEnded<T>(
  ask: () => Promise<T>,
  running: (answer: T) => boolean,
  options: { readonly forMs: number; readonly everyMs: number },
): Promise<T> {
  const deadline = Date.now() + options.forMs
  for (;;) {
    const answer = await ask()
    if (!running(answer) || Date.now() >= deadline) return answer
    await sleep(options.everyMs)
  }
}
