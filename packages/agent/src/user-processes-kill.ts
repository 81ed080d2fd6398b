import { childProcess } from './child-process-module.js'
import { readProcessTable } from './process-table.js'

/** Passes over `/proc` before the agent gives up on processes that keep forking. */
const MAX_KILL_PASSES = 50
/** Empty passes in a row that count as none left (one can miss a process forking as it exits). */
const EMPTY_PASSES_NEEDED = 3
/** Runs of `cordon-launcher --kill-user` before the passes alone are left (each may be killed by the user it acts as). */
const MAX_LAUNCHER_RUNS = 5
/** How long one run may take: thousands of rounds of a millisecond and a look at /proc. */
const LAUNCHER_RUN_TIMEOUT_MS = 30_000

export interface UserProcessesKill {
  /** Processes this function sent SIGKILL itself (after the launcher's runs, what they left). */
  readonly killed: number
  /** Whether a run of `cordon-launcher --kill-user` reported that the user had no process left. */
  readonly launcherEnded: boolean
}

/**
 * Ends every process whose real uid is `user.uid`, including a chain of
 * processes that fork and exit at once. With cordon-launcher, that program
 * does it as the user (stop them all, see every one stopped, then kill:
 * launcher/kill-user.c), since a look at `/proc` alone can miss such a
 * chain; then, and without the launcher alone, passes over `/proc` send
 * SIGKILL to whatever they find until several passes in a row find nothing
 * (the agent holds CAP_KILL; the sandbox's process limit bounds how many
 * there can be).
 */
export function killProcessesOf(
  user: { readonly uid: number; readonly gid: number },
  launcher: string | undefined,
): UserProcessesKill {
  let launcherEnded = false
  if (launcher && user.uid !== 0) {
    for (let run = 0; run < MAX_LAUNCHER_RUNS && !launcherEnded; run++) {
      const result = childProcess().spawnSync(
        launcher,
        ['--kill-user', String(user.uid), String(user.gid)],
        { stdio: 'ignore', timeout: LAUNCHER_RUN_TIMEOUT_MS },
      )
      // Not 0: it ran out of rounds, could not start, or the user's processes killed it.
      launcherEnded = result.status === 0
    }
  }
  let killed = 0
  let emptyInARow = 0
  for (let pass = 0; pass < MAX_KILL_PASSES && emptyInARow < EMPTY_PASSES_NEEDED; pass++) {
    const targets = readProcessTable().filter(
      (entry) => entry.uid === user.uid && entry.pid !== process.pid,
    )
    emptyInARow = targets.length === 0 ? emptyInARow + 1 : 0
    for (const { pid } of targets) {
      try {
        process.kill(pid, 'SIGKILL')
        killed++
      } catch {
        // Gone in between.
      }
    }
  }
  return { killed, launcherEnded }
}
