import { readdirSync, readFileSync } from 'node:fs'

/**
 * The guest's process table, read from `/proc` (under gVisor, the sandbox's
 * own). Used to find the sandbox user's processes: to count them, and to
 * kill them all when the agent ends.
 */

export interface ProcessEntry {
  readonly pid: number
  /** Real uid. */
  readonly uid: number
  readonly threads: number
}

/** Every process visible now; one that exits while it is read is left out. */
export function readProcessTable(): ProcessEntry[] {
  let names: string[]
  try {
    names = readdirSync('/proc')
  } catch {
    return []
  }
  const entries: ProcessEntry[] = []
  for (const name of names) {
    if (!/^\d+$/.test(name)) continue
    try {
      const status = readFileSync(`/proc/${name}/status`, 'utf8')
      const uid = /^Uid:\s+(\d+)/m.exec(status)
      const threads = /^Threads:\s+(\d+)/m.exec(status)
      if (uid)
        entries.push({ pid: Number(name), uid: Number(uid[1]), threads: Number(threads?.[1] ?? 1) })
    } catch {
      // Gone in between.
    }
  }
  return entries
}
