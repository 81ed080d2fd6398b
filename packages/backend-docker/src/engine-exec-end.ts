import type Docker from 'dockerode'

/**
 * What the engine says about an exec whose output has ended.
 *
 * The engine handles an exec's exit as an event of its own: on a loaded
 * machine its inspect still says "running" (and gives no exit code) for a
 * moment after the process is gone, while the attach stream has already
 * ended and a resize already fails because the process stopped. Everything
 * that reads an engine exec's end goes through here so none of them takes
 * that moment for the answer.
 */

type EngineExec = Awaited<ReturnType<Docker.Container['exec']>>

/** How long the engine is given to catch up with an exec's end. */
export const ENGINE_EXIT_NOTICE_MS = 10_000

/**
 * The exit code of an exec whose output has ended: a "still running" answer
 * is asked again, every 25 ms for `ENGINE_EXIT_NOTICE_MS`; -1 if the engine
 * never says. An engine that cannot be asked throws its own error, which
 * says more than any exit code would.
 */
export async function engineExecExitCode(exec: EngineExec): Promise<number> {
  const deadline = Date.now() + ENGINE_EXIT_NOTICE_MS
  for (;;) {
    const info = (await exec.inspect()) as { Running?: boolean; ExitCode?: number | null }
    if (!info.Running || Date.now() > deadline) return info.ExitCode ?? -1
    await new Promise((resolve) => setTimeout(resolve, 25))
  }
}
