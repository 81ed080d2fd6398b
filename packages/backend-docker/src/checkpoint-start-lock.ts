import { randomBytes } from 'node:crypto'
import {
  type BigIntStats,
  closeSync,
  fstatSync,
  linkSync,
  openSync,
  readFileSync,
  renameSync,
  rmSync,
  statSync,
  writeSync,
} from 'node:fs'
import { setTimeout as sleep } from 'node:timers/promises'

/**
 * One start from a given checkpoint at a time on this engine, across host
 * processes. Two starts of one checkpoint at once collide in containerd's
 * content store, and the copy containerd leaves of a checkpoint can be told
 * apart from another start's only when no other start of it is under way
 * (containerd-checkpoint-copies.ts).
 *
 * The lock is a file created exclusively beside the checkpoint, holding the
 * holder's pid: a holder that died (its pid gone) or one that has held it
 * past STALE_AFTER_MS (a start never takes that long) is taken over, and
 * only the very file found abandoned is removed ({@link removeLockIf}). Node
 * has no advisory file lock of its own, and a lock that needs none keeps
 * the backend free of a native dependency.
 */

/** How long a start may hold the lock before another host treats it as abandoned. */
const STALE_AFTER_MS = 120_000

/** How often a waiting start looks again. */
const POLL_MS = 20

/**
 * A lock file's identity: a file put in its place later is another one.
 * The inode alone is not enough (a file system hands a freed inode number
 * to the next file made), so its modification time in nanoseconds and the
 * holder it names are part of it.
 */
function identityOf(stats: BigIntStats, holder: string): string {
  return `${stats.dev}:${stats.ino}:${stats.mtimeNs}:${holder}`
}

function identityAt(path: string): string {
  return identityOf(statSync(path, { bigint: true }), readFileSync(path, 'utf8'))
}

/**
 * The identity of the lock file at `path` if its holder is gone (its pid
 * not a live process, or the file older than STALE_AFTER_MS), else
 * undefined. The identity is what a takeover removes, and nothing else.
 */
export function abandonedLock(path: string, now: number): string | undefined {
  try {
    const stats = statSync(path, { bigint: true })
    const holder = readFileSync(path, 'utf8')
    if (now - Number(stats.mtimeMs) > STALE_AFTER_MS) return identityOf(stats, holder)
    const pid = Number(holder.trim())
    // An empty file is a holder between its create and its write.
    if (!Number.isInteger(pid) || pid <= 0) return undefined
    try {
      process.kill(pid, 0)
      return undefined
    } catch (error) {
      // ESRCH: no such process. EPERM: a process exists under another user.
      return (error as NodeJS.ErrnoException).code === 'ESRCH'
        ? identityOf(stats, holder)
        : undefined
    }
  } catch {
    // ENOENT: the holder let go as this looked.
    return undefined
  }
}

/**
 * Removes the lock file at `path` only if it is still the file `identity`
 * names. Two waiters that found the same dead holder would otherwise both
 * remove "its" lock, the second removing the first's fresh one, and two
 * starts would run at once; and a holder whose lock was taken over as stale
 * would remove its successor's when it finishes. So the file is first
 * moved aside (a rename is atomic: of two movers only one gets it), then
 * compared; another's lock is put back with a link, which cannot overwrite
 * a lock made meanwhile. What is left: a third start that makes its lock
 * in the microseconds between the move and the link-back ends up running
 * beside the holder whose lock was moved.
 */
export function removeLockIf(path: string, identity: string): void {
  const aside = `${path}.${process.pid}-${randomBytes(6).toString('hex')}`
  try {
    renameSync(path, aside)
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === 'ENOENT') return
    throw error
  }
  try {
    if (identityAt(aside) === identity) return
    try {
      linkSync(aside, path)
    } catch {
      // A lock was made meanwhile (the window above); it stands.
    }
  } finally {
    rmSync(aside, { force: true })
  }
}

/**
 * Runs `work` holding the lock at `path`, waiting for another holder to let
 * go (or be found gone). `signal` ends the wait.
 */
export async function withStartLock<T>(
  path: string,
  work: () => Promise<T>,
  signal?: AbortSignal,
): Promise<T> {
  let held: string
  for (;;) {
    signal?.throwIfAborted()
    try {
      const fd = openSync(path, 'wx', 0o600)
      try {
        writeSync(fd, String(process.pid))
        held = identityOf(fstatSync(fd, { bigint: true }), String(process.pid))
      } finally {
        closeSync(fd)
      }
      break
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code !== 'EEXIST') throw error
      const abandoned = abandonedLock(path, Date.now())
      if (abandoned !== undefined) {
        removeLockIf(path, abandoned)
        continue
      }
      await sleep(POLL_MS)
    }
  }
  try {
    return await work()
  } finally {
    // Only this start's own lock: a successor's, if this one's was taken over as stale, stays.
    removeLockIf(path, held)
  }
}
