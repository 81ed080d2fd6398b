import { closeSync, constants, type Dirent, lstatSync, openSync, readdirSync } from 'node:fs'
import { setImmediate as yieldToEventLoop } from 'node:timers/promises'
import type { ActAs } from './user-identity.js'

/**
 * How much disk a directory tree takes, the root itself not counted. One
 * walker for the usage report and the storage caps.
 *
 * What counts for a regular file is the larger of its size and the blocks
 * allocated to it: a sparse file what it claims (what a host tool copying
 * it out writes), a file with space allocated past its end (fallocate with
 * FALLOC_FL_KEEP_SIZE) what it takes on the disk.
 *
 * The walk never follows a symbolic link and cannot be led out of the tree
 * by one swapped in while it runs: each directory is opened through its
 * parent's open descriptor (`/proc/self/fd/<parent>/<name>`, with O_NOFOLLOW
 * and O_DIRECTORY, which is openat() for a runtime that has none), so a
 * directory replaced by a link between its listing and its opening is
 * refused, not walked. Run by the agent as root with CAP_DAC_OVERRIDE, it
 * sees every entry whatever its modes: a directory the sandbox made
 * unreadable (mode 0300) hides nothing.
 *
 * The sandbox must not be able to tell where the walk is: an audit watched
 * the agent open and list its directories (inotify's read events) and moved
 * a directory of 120 MiB, each time, into one the walk had just listed, so
 * that no walk of a 16 MiB cap ever counted it. Commands are refused those
 * events (the launcher's system call filter); the walk opens directories
 * without updating their access times (O_NOATIME, where the agent may),
 * which a sandbox could otherwise poll for the same answer; and each walk
 * goes through a directory's entries in a fresh random order, so that even
 * knowing when a walk runs does not tell which directory it has passed.
 */

/** Entries examined per synchronous slice; between slices the agent serves its other work. */
const ENTRIES_PER_SLICE = 2_000
const OPEN_DIRECTORY = constants.O_RDONLY | constants.O_DIRECTORY | constants.O_NOFOLLOW
/** Needs the directory's owner or CAP_FOWNER (which the agent holds with a writable host directory). */
const OPEN_DIRECTORY_UNSEEN = OPEN_DIRECTORY | constants.O_NOATIME
/** st_blocks is in units of 512 bytes, whatever the filesystem's block size. */
const BLOCK_UNIT = 512

export interface TreeSizeOptions {
  /**
   * The least any entry counts. 0: only regular files count (their size or
   * allocation). Above 0: every entry counts, a directory, link or other
   * entry its allocation but no less than this, so a flood of empty files
   * or directories, which takes inodes rather than bytes, counts too.
   */
  readonly minEntryBytes?: number
  /** Stop walking once the total passes this: the caller only needs to know that. */
  readonly stopAbove?: number
}

/** A directory the walk has opened, held open until its last subdirectory is opened through it. */
interface OpenDirectory {
  readonly fd: number
  waitingChildren: number
}

interface PendingDirectory {
  readonly parent: OpenDirectory | undefined
  /** The name under `parent`, or the root's own path. */
  readonly name: string
}

interface Walk {
  readonly pending: PendingDirectory[]
  total: number
  readonly minEntryBytes: number
  readonly stopAbove: number
}

/** The disk one entry takes as the walk counts it, from its lstat. */
export function entryBytes(
  stats: { isFile(): boolean; size: number; blocks: number },
  minEntryBytes: number,
): number {
  const allocated = stats.blocks * BLOCK_UNIT
  if (stats.isFile()) return Math.max(stats.size, allocated, minEntryBytes)
  return minEntryBytes > 0 ? Math.max(allocated, minEntryBytes) : 0
}

export async function treeBytes(
  root: string,
  actAs: ActAs,
  options: TreeSizeOptions = {},
): Promise<number> {
  const walk: Walk = {
    pending: [{ parent: undefined, name: root }],
    total: 0,
    minEntryBytes: options.minEntryBytes ?? 0,
    stopAbove: options.stopAbove ?? Number.POSITIVE_INFINITY,
  }
  try {
    while (walk.pending.length > 0 && walk.total <= walk.stopAbove) {
      actAs(() => walkSlice(walk))
      if (walk.pending.length > 0) await yieldToEventLoop()
    }
  } finally {
    // Stopped early: release what is still held open.
    for (const { parent } of walk.pending.splice(0)) if (parent) release(parent)
  }
  return walk.total
}

function release(directory: OpenDirectory): void {
  directory.waitingChildren--
  if (directory.waitingChildren === 0) closeSync(directory.fd)
}

function walkSlice(walk: Walk): void {
  let examined = 0
  while (walk.pending.length > 0 && examined < ENTRIES_PER_SLICE) {
    const { parent, name } = walk.pending.pop()!
    let fd: number
    try {
      fd = openDirectory(parent ? `/proc/self/fd/${parent.fd}/${name}` : name)
    } catch {
      continue // Removed or replaced in between (a link now: not followed).
    } finally {
      if (parent) release(parent)
    }
    const directory: OpenDirectory = { fd, waitingChildren: 1 }
    const at = `/proc/self/fd/${fd}/`
    let entries: Dirent[] = []
    try {
      entries = readdirSync(at, { withFileTypes: true })
    } catch {
      // Removed in between.
    }
    shuffle(entries)
    for (const entry of entries) {
      examined++
      try {
        const stats = lstatSync(at + entry.name)
        walk.total += entryBytes(stats, walk.minEntryBytes)
        if (stats.isDirectory()) {
          directory.waitingChildren++
          walk.pending.push({ parent: directory, name: entry.name })
        }
      } catch {
        // Removed in between.
      }
      if (walk.total > walk.stopAbove) break
    }
    release(directory)
    if (walk.total > walk.stopAbove) return
  }
}

/** Opens a directory without touching its access time where the agent may, else as before. */
function openDirectory(path: string): number {
  try {
    return openSync(path, OPEN_DIRECTORY_UNSEEN)
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code !== 'EPERM') throw error
    return openSync(path, OPEN_DIRECTORY)
  }
}

/** Fisher-Yates, in place. */
function shuffle<T>(items: T[]): void {
  for (let last = items.length - 1; last > 0; last--) {
    const other = Math.floor(Math.random() * (last + 1))
    const kept = items[last]!
    items[last] = items[other]!
    items[other] = kept
  }
}
