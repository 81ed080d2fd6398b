import { setTimeout as sleep } from 'node:timers/promises'
import type { StorageCap } from './agent-config.js'
import { heldDeletedFiles } from './held-files.js'
import { readProcessTable } from './process-table.js'
import { treeBytes } from './tree-size.js'
import type { ActAs } from './user-identity.js'

/**
 * Holding a writable host directory to its cap.
 *
 * A bind-mounted host directory has no size of its own: without a quota on
 * the host's filesystem (which cordon cannot count on: XFS project quotas,
 * a loop device or a dedicated volume all need the host's administrator),
 * a sandbox could fill the host's disk through it. Three things bound it
 * instead. The kernel's file size limit (RLIMIT_FSIZE, which the backend sets
 * to the cap) stops any single file at the cap, exactly, whoever writes it;
 * the launcher's system call filter refuses the one call that allocates past
 * that limit (fallocate with FALLOC_FL_KEEP_SIZE). And this watch measures
 * each capped directory while the sandbox's user has processes, and ends the
 * sandbox once the total passes the cap, as Kubernetes evicts a pod whose
 * `emptyDir` passes its `sizeLimit`. What a sandbox can write past the cap
 * is what it writes between two measurements (the check interval plus one
 * walk of the tree), spread over several files; the Docker README gives the
 * figure measured here.
 *
 * What counts (tree-size.ts, held-files.ts): every entry under the
 * directory whatever its modes, a regular file the larger of its size and
 * its allocated blocks, every entry at least one 4 KiB block (a flood of
 * empty files or directories takes inodes rather than bytes); and the files
 * the user's processes hold open after deleting them. A deleted file held
 * only by a memory mapping cannot be measured and is charged the most any
 * file can hold (the file size limit, the largest cap). A single file
 * exactly at the cap, alone, is within it.
 */

/** The least an entry is charged: one block, for the inode and directory entry it takes. */
const MIN_ENTRY_BYTES = 4_096

/** A capped directory found past its cap. */
export interface StorageExcess {
  readonly root: string
  readonly usedBytes: number
  readonly capBytes: number
}

/** The disk the tree under `root` takes, as the cap counts it; stops early once past `stopAbove`. */
export function measureStorage(
  root: string,
  actAs: ActAs,
  stopAbove = Number.POSITIVE_INFINITY,
): Promise<number> {
  return treeBytes(root, actAs, { minEntryBytes: MIN_ENTRY_BYTES, stopAbove })
}

/**
 * Measures every cap once; the first directory past its cap, if any. `uid`
 * is the sandbox's user, whose processes' deleted files count too.
 */
export async function findExcess(
  caps: readonly StorageCap[],
  actAs: ActAs,
  uid?: number,
): Promise<StorageExcess | undefined> {
  const held =
    uid === undefined
      ? undefined
      : heldDeletedFiles(
          uid,
          caps.map((cap) => cap.root),
        )
  // The file size limit is the largest cap: no file anywhere in the sandbox holds more.
  const mostAFileHolds = Math.max(...caps.map((cap) => cap.bytes))
  for (const cap of caps) {
    const onRoot = held?.get(cap.root)
    const heldBytes = (onRoot?.bytes ?? 0) + (onRoot?.unmeasured ?? 0) * mostAFileHolds
    const usedBytes = heldBytes + (await measureStorage(cap.root, actAs, cap.bytes - heldBytes))
    if (usedBytes > cap.bytes) return { root: cap.root, usedBytes, capBytes: cap.bytes }
  }
  return undefined
}

export interface StorageWatchOptions {
  readonly caps: readonly StorageCap[]
  readonly actAs: ActAs
  /** The sandbox's user: the watch measures while it has processes, and once after they end. */
  readonly uid: number
  readonly intervalMs: number
  readonly onExceeded: (excess: StorageExcess) => void
}

/**
 * A pause between measurements at least this many times as long as the last
 * measurement took: a large tree (a dependency folder in the outputs) is then
 * walked at most a fifth of the time, not back to back while a long command runs.
 */
const PAUSE_PER_WALK = 4

/**
 * Measures the capped directories every `intervalMs` (or longer, for a tree
 * that takes long to walk) while the sandbox's user has a process (only its
 * processes write there; the host's own writes through the agent are checked
 * on the next such round), and once more after the last one ends. Calls
 * `onExceeded` once and stops.
 */
export function watchStorage(options: StorageWatchOptions): { stop(): void } {
  let stopped = false
  let measureAgain = true
  void (async () => {
    while (!stopped) {
      const active = readProcessTable().some((entry) => entry.uid === options.uid)
      let walkedMs = 0
      if (active || measureAgain) {
        const started = performance.now()
        const excess = await findExcess(options.caps, options.actAs, options.uid)
        walkedMs = performance.now() - started
        if (excess && !stopped) {
          stopped = true
          options.onExceeded(excess)
          return
        }
      }
      measureAgain = active
      // Not a reason for the agent to stay alive on its own.
      await sleep(Math.max(options.intervalMs, PAUSE_PER_WALK * walkedMs), undefined, {
        ref: false,
      })
    }
  })()
  return {
    stop() {
      stopped = true
    },
  }
}
