import { closeSync, openSync, readFileSync, rmSync, statSync, writeSync } from 'node:fs'
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
 * past STALE_AFTER_MS (a start never takes that long) is taken over. Node
 * has no advisory file lock of its own, and a lock that needs none keeps
 * the backend free of a native dependency.
 */

/** How long a start may hold the lock before another host treats it as abandoned. */
const STALE_AFTER_MS = 120_000

/** How often a waiting start looks again. */
const POLL_MS = 20

function holderIsGone(path: string, now: number): boolean {
  try {
    if (now - statSync(path).mtimeMs > STALE_AFTER_MS) return true
    const pid = Number(readFileSync(path, 'utf8').trim())
    if (!Number.isInteger(pid) || pid <= 0) return false
    process.kill(pid, 0)
    return false
  } catch (error) {
    // ESRCH: no such process. EPERM: a process exists under another user.
    // ENOENT: the holder let go as this looked.
    const code = (error as NodeJS.ErrnoException).code
    return code === 'ESRCH'
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
  for (;;) {
    signal?.throwIfAborted()
    try {
      const fd = openSync(path, 'wx', 0o600)
      try {
        writeSync(fd, String(process.pid))
      } finally {
        closeSync(fd)
      }
      break
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code !== 'EEXIST') throw error
      if (holderIsGone(path, Date.now())) {
        rmSync(path, { force: true })
        continue
      }
      await sleep(POLL_MS)
    }
  }
  try {
    return await work()
  } finally {
    rmSync(path, { force: true })
  }
}
