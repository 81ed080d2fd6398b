import type { ChildProcess } from 'node:child_process'
import { readFileSync, writeFileSync } from 'node:fs'
import type { Readable, Writable } from 'node:stream'
import { childProcess } from './child-process-module.js'

/**
 * How the agent starts a command. Two implementations with one behaviour:
 * {@link nodeLauncher} (Node's own spawn, always available) and the native
 * launcher (launcher-client.ts), which starts commands with vfork() from a
 * small process and so avoids copying the agent's page tables for every
 * command.
 */
export interface LaunchRequest {
  readonly command: string
  readonly args: readonly string[]
  readonly cwd: string
  /** The command's whole environment. */
  readonly env: Record<string, string>
  /** Give the command a stdin pipe (otherwise it reads /dev/null). */
  readonly stdin: boolean
  /**
   * Start the command as this user, with no supplementary groups but its
   * exec's tag where the launcher gives one ({@link LaunchedProcess.execGroup}).
   */
  readonly runAs: { readonly uid: number; readonly gid: number } | undefined
  /** Raise the command's OOM score to the maximum, so the kernel picks it before the agent. */
  readonly raiseOomScore: boolean
}

export interface LaunchOutcome {
  /** The exit code, or null when a signal ended the command. */
  readonly code: number | null
  readonly signal: NodeJS.Signals | null
}

/** A started command, in a session (and process group) of its own. */
export interface LaunchedProcess {
  readonly pid: number
  /**
   * The supplementary group every process of this command carries and none
   * can shed (exec-group.ts), by which a kill finds them all; undefined when
   * the command is untagged (Node's spawn, no change of user, or a user
   * namespace that does not map the tags).
   */
  readonly execGroup?: number | undefined
  readonly stdin: Writable | undefined
  readonly stdout: Readable
  readonly stderr: Readable
  /** Resolves when the command has exited. */
  readonly exited: Promise<LaunchOutcome>
  /** Resolves when the command has exited and both its outputs have ended. */
  readonly closed: Promise<LaunchOutcome>
}

export interface ProcessLauncher {
  /** Starts a command; rejects with the system error (`code` ENOENT, EACCES, ...) when it cannot. */
  launch(request: LaunchRequest): Promise<LaunchedProcess>
}

/** Node's spawn: forks the agent, so it costs a copy of the agent's page tables each time. */
export const nodeLauncher: ProcessLauncher = {
  launch(request) {
    const child = spawnRaisingOomScore(request)
    return new Promise((resolve, reject) => {
      const started = (): void => resolve(wrapChild(child))
      if (child.pid !== undefined) return started()
      child.once('error', reject)
      child.once('spawn', started)
    })
  },
}

function wrapChild(child: ChildProcess): LaunchedProcess {
  const outcome = (code: number | null, signal: NodeJS.Signals | null): LaunchOutcome => ({
    code,
    signal,
  })
  return {
    pid: child.pid!,
    stdin: child.stdin ?? undefined,
    stdout: child.stdout!,
    stderr: child.stderr!,
    exited: new Promise((resolve) => child.once('exit', (c, s) => resolve(outcome(c, s)))),
    closed: new Promise((resolve) => child.once('close', (c, s) => resolve(outcome(c, s)))),
  }
}

/**
 * With `raiseOomScore`, the agent raises its own OOM score to the maximum
 * just for the synchronous spawn, so the child inherits it, then lowers it
 * back. Lowering back is allowed without privileges because it returns to
 * the value the agent started with.
 */
function spawnRaisingOomScore(request: LaunchRequest): ChildProcess {
  let previous: string | undefined
  if (request.raiseOomScore) {
    try {
      previous = readFileSync('/proc/self/oom_score_adj', 'utf8').trim()
      writeFileSync('/proc/self/oom_score_adj', '1000')
    } catch {
      previous = undefined
    }
  }
  try {
    return childProcess().spawn(request.command, [...request.args], {
      cwd: request.cwd,
      env: request.env,
      ...(request.runAs ? { uid: request.runAs.uid, gid: request.runAs.gid } : {}),
      detached: true,
      stdio: [request.stdin ? 'pipe' : 'ignore', 'pipe', 'pipe'],
      windowsHide: true,
    })
  } finally {
    if (previous !== undefined) {
      try {
        writeFileSync('/proc/self/oom_score_adj', previous)
      } catch {
        // Stays raised; the agent is then no more protected than its commands.
      }
    }
  }
}
