import { chmodSync, type Dirent, lstatSync, readdirSync, readlinkSync, unlinkSync } from 'node:fs'
import { dirname, join, relative, resolve } from 'node:path'
import { readProcessTable } from './process-table.js'
import type { ActAs } from './user-identity.js'

/**
 * Making a sandbox's host-visible outputs safe to hand to other tools once
 * the sandbox has ended.
 *
 * A writable host directory is the sandbox user's to shape while it runs: it
 * can leave FIFOs (a host tool that opens one blocks forever), sockets,
 * symbolic links to `/etc/shadow` (a host tool that follows links, running as
 * root, reads it), and files or directories with the setuid or setgid bit (a
 * setuid program of the sandbox's uid). Device files cannot appear: the
 * sandbox has no CAP_MKNOD. When the agent ends, by any route (the host
 * destroying the sandbox, the host dying, the lifetime), it first kills every
 * process of the sandbox's user, so nothing can add a trap behind it, then
 * walks each such directory as that user and removes what a host tool could
 * trip on. What stays: regular files and directories without set-id bits,
 * and symbolic links whose target, read as a path, stays inside the
 * directory. Names stay as they were: they may hold any byte but `/` and
 * NUL, newlines and terminal escapes included.
 */

/** What a seal changed, for the agent's log. */
export interface SealReport {
  readonly removed: number
  readonly modesCleared: number
  readonly failures: number
}

const SET_ID_BITS = 0o6000
/** Passes over `/proc` before the agent gives up on processes that keep forking. */
const MAX_KILL_PASSES = 50

/**
 * Sends SIGKILL to every process whose real uid is `uid` until none is left
 * (a process forking while it is killed shows up in the next pass; the
 * sandbox's process limit bounds how many there can be). The agent holds
 * CAP_KILL for this. Returns how many it killed.
 */
export function killProcessesOf(uid: number): number {
  let killed = 0
  for (let pass = 0; pass < MAX_KILL_PASSES; pass++) {
    const targets = readProcessTable().filter(
      (entry) => entry.uid === uid && entry.pid !== process.pid,
    )
    if (targets.length === 0) break
    for (const { pid } of targets) {
      try {
        process.kill(pid, 'SIGKILL')
        killed++
      } catch {
        // Gone in between.
      }
    }
  }
  return killed
}

/** Walks each root as the sandbox's user and removes or defuses every trap in it. */
export function sealOutputs(roots: readonly string[], actAs: ActAs): SealReport {
  let removed = 0
  let modesCleared = 0
  let failures = 0
  for (const root of roots) {
    const pending: string[] = [root]
    while (pending.length > 0) {
      const directory = pending.pop()!
      let entries: Dirent[]
      try {
        entries = actAs(() => openDirectory(directory))
      } catch {
        failures++
        continue
      }
      for (const entry of entries) {
        const path = join(directory, entry.name)
        try {
          actAs(() => {
            const stats = lstatSync(path)
            if (stats.isSymbolicLink()) {
              if (!isInside(root, resolve(dirname(path), readlinkSync(path)))) {
                unlinkSync(path)
                removed++
              }
              return
            }
            if (!stats.isFile() && !stats.isDirectory()) {
              // FIFOs and sockets (device files cannot be made without CAP_MKNOD).
              unlinkSync(path)
              removed++
              return
            }
            if (stats.mode & SET_ID_BITS) {
              chmodSync(path, stats.mode & 0o1777)
              modesCleared++
            }
            if (stats.isDirectory()) pending.push(path)
          })
        } catch {
          failures++
        }
      }
    }
  }
  return { removed, modesCleared, failures }
}

/** Lists a directory; one the user owns but made unreadable is opened up to its owner first. */
function openDirectory(directory: string): Dirent[] {
  try {
    return readdirSync(directory, { withFileTypes: true })
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code !== 'EACCES') throw error
    chmodSync(directory, (lstatSync(directory).mode & 0o1777) | 0o700)
    return readdirSync(directory, { withFileTypes: true })
  }
}

function isInside(root: string, target: string): boolean {
  const path = relative(root, target)
  return path !== '..' && !path.startsWith('../') && !path.startsWith('/')
}
