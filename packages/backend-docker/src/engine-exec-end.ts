import type Docker from 'dockerode'
import { askUntilEnded } from './engine-lag.js'

/**
 * What the engine says about an exec whose output has ended (the engine's
 * inspect lags it: engine-lag.ts). Terminals and the filesystem snapshot's
 * programs read their exit code here.
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
  const info = await askUntilEnded(
    async () => (await exec.inspect()) as { Running?: boolean; ExitCode?: number | null },
    (answer) => answer.Running === true,
    { forMs: ENGINE_EXIT_NOTICE_MS, everyMs: 25 },
  )
  return info.ExitCode ?? -1
}
