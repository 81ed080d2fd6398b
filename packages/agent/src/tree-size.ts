import { type Dirent, lstatSync, readdirSync } from 'node:fs'
import { join } from 'node:path'
import { setImmediate as yieldToEventLoop } from 'node:timers/promises'
import type { ActAs } from './user-identity.js'

/**
 * How much a directory tree holds, walked as the sandbox's user (so exactly
 * what that user can reach), the root itself not counted. One walker for
 * the usage report and the storage caps.
 */

/** Entries examined per synchronous slice; between slices the agent serves its other work. */
const ENTRIES_PER_SLICE = 2_000

export interface TreeSizeOptions {
  /**
   * The least any entry counts (a file its size, but no less; a directory,
   * link or other entry exactly this): 0 counts only the bytes of regular
   * files; one block counts a flood of empty files or directories too.
   */
  readonly minEntryBytes?: number
  /** Stop walking once the total passes this: the caller only needs to know that. */
  readonly stopAbove?: number
}

export async function treeBytes(
  root: string,
  actAs: ActAs,
  options: TreeSizeOptions = {},
): Promise<number> {
  const walk = {
    pending: [root],
    total: 0,
    minEntryBytes: options.minEntryBytes ?? 0,
    stopAbove: options.stopAbove ?? Number.POSITIVE_INFINITY,
  }
  while (walk.pending.length > 0 && walk.total <= walk.stopAbove) {
    actAs(() => walkSlice(walk))
    if (walk.pending.length > 0) await yieldToEventLoop()
  }
  return walk.total
}

function walkSlice(walk: {
  pending: string[]
  total: number
  readonly minEntryBytes: number
  readonly stopAbove: number
}): void {
  let examined = 0
  while (walk.pending.length > 0 && examined < ENTRIES_PER_SLICE) {
    const directory = walk.pending.pop()!
    let entries: Dirent[]
    try {
      entries = readdirSync(directory, { withFileTypes: true })
    } catch {
      continue // Removed in between, or not the user's to read (then not the user's to fill either).
    }
    for (const entry of entries) {
      const path = join(directory, entry.name)
      examined++
      if (entry.isFile()) {
        try {
          walk.total += Math.max(lstatSync(path).size, walk.minEntryBytes)
        } catch {
          continue // Removed in between.
        }
      } else {
        walk.total += walk.minEntryBytes
        if (entry.isDirectory()) walk.pending.push(path)
      }
      if (walk.total > walk.stopAbove) return
    }
  }
}
