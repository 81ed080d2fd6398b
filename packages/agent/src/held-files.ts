import { lstatSync, readdirSync, readFileSync, readlinkSync, statSync } from 'node:fs'
import { readProcessTable } from './process-table.js'
import { entryBytes } from './tree-size.js'

/**
 * Disk a sandbox's processes hold through files no directory lists any more.
 *
 * A file that is unlinked while a process still has it open, or mapped,
 * keeps its blocks until the last holder lets go: a walk of the directory
 * cannot see it, yet the host's disk is full all the same. The agent
 * therefore also looks at every process of the sandbox's user: each open
 * descriptor of a regular file with no links left (and an O_TMPFILE file,
 * which never had one), or whose path the kernel marks deleted and no
 * longer names it, counts what it takes, by its stat through
 * `/proc/<pid>/fd/<n>`, once however many descriptors share it; it is
 * charged to the measured directory its path was under, on the same
 * filesystem.
 *
 * A deleted file that is only mapped (its descriptor closed after mmap)
 * cannot be measured from inside a container: its stat is reachable only
 * through `/proc/<pid>/map_files`, which needs CAP_SYS_ADMIN. Such a file is
 * reported as unmeasured, and the storage cap charges it the most a file can
 * hold there (see storage-watch.ts).
 *
 * Reading another process's descriptors and maps needs ptrace read access:
 * the agent holds CAP_SYS_PTRACE for it, so a process that made itself
 * non-dumpable hides nothing.
 */

export interface HeldRoot {
  readonly root: string
}

export interface HeldOnRoot {
  /** What deleted files still open take, counted as the tree walk counts a file. */
  bytes: number
  /** Deleted files held only by a memory mapping: their size cannot be read. */
  unmeasured: number
}

const DELETED_SUFFIX = ' (deleted)'

/**
 * What the processes of `uid` hold on each root's filesystem through files
 * that no longer have a name. A root that cannot be examined counts nothing.
 */
export function heldDeletedFiles(uid: number, roots: readonly string[]): Map<string, HeldOnRoot> {
  const held = new Map<string, HeldOnRoot>()
  const devices = new Map<string, number>()
  for (const root of roots) {
    held.set(root, { bytes: 0, unmeasured: 0 })
    try {
      devices.set(root, lstatSync(root).dev)
    } catch {
      // Not mounted: nothing can be held there.
    }
  }
  if (devices.size === 0) return held
  // The most specific root first, for a path under two of them.
  const byDepth = [...devices.keys()].sort((a, b) => b.length - a.length)
  const rootOf = (path: string): string | undefined =>
    byDepth.find((root) => path === root || path.startsWith(root === '/' ? '/' : `${root}/`))
  const counted = new Set<string>()

  const processes = readProcessTable().filter((entry) => entry.uid === uid)
  for (const { pid } of processes) {
    let descriptors: string[]
    try {
      descriptors = readdirSync(`/proc/${pid}/fd`)
    } catch {
      continue // Gone in between.
    }
    for (const descriptor of descriptors) {
      const link = `/proc/${pid}/fd/${descriptor}`
      try {
        const stats = statSync(link)
        if (!stats.isFile()) continue
        const named = readlinkSync(link)
        const path = withoutDeletedSuffix(named)
        if (stats.nlink !== 0 && (path === named || isNamed(path, stats))) continue
        const root = rootOf(path)
        if (root === undefined || devices.get(root) !== stats.dev) continue
        const key = `${stats.dev}:${stats.ino}`
        if (counted.has(key)) continue
        counted.add(key)
        held.get(root)!.bytes += entryBytes(stats, 0)
      } catch {
        // Closed in between.
      }
    }
  }
  // Mappings last: a file both open and mapped was measured through its descriptor.
  for (const { pid } of processes) {
    let maps: string
    try {
      maps = readFileSync(`/proc/${pid}/maps`, 'utf8')
    } catch {
      continue
    }
    for (const mapping of deletedMappings(maps)) {
      const root = rootOf(mapping.path)
      if (root === undefined) continue
      const device = devices.get(root)!
      if (deviceNumbers(device) !== mapping.device) continue
      const key = `${device}:${mapping.inode}`
      if (counted.has(key)) continue
      counted.add(key)
      held.get(root)!.unmeasured++
    }
  }
  return held
}

/**
 * Whether `path` names this very file: then a " (deleted)" at the end of
 * its link was part of its name. gVisor keeps a deleted file's link count
 * at 1, so there the suffix, checked so, is what tells a deleted file.
 */
function isNamed(path: string, file: { dev: number; ino: number }): boolean {
  try {
    const named = lstatSync(path)
    return named.dev === file.dev && named.ino === file.ino
  } catch {
    return false
  }
}

function withoutDeletedSuffix(path: string): string {
  return path.endsWith(DELETED_SUFFIX) ? path.slice(0, -DELETED_SUFFIX.length) : path
}

interface DeletedMapping {
  /** `major:minor` in hex, as the maps file writes it. */
  readonly device: string
  readonly inode: string
  readonly path: string
}

/** Lines of a `/proc/<pid>/maps` file that map a deleted file. */
export function deletedMappings(maps: string): DeletedMapping[] {
  const found: DeletedMapping[] = []
  for (const line of maps.split('\n')) {
    if (!line.endsWith(DELETED_SUFFIX)) continue
    // address perms offset dev inode, then spaces, then the path (which may hold spaces).
    const match = /^\S+ \S+ \S+ ([0-9a-f]+:[0-9a-f]+) (\d+) +(\/.*)$/.exec(line)
    if (!match || match[2] === '0') continue
    found.push({
      device: normalizeDevice(match[1]!),
      inode: match[2]!,
      path: withoutDeletedSuffix(match[3]!),
    })
  }
  return found
}

function normalizeDevice(text: string): string {
  const [major, minor] = text.split(':')
  return `${Number.parseInt(major!, 16)}:${Number.parseInt(minor!, 16)}`
}

/** `major:minor` of a stat's device number (glibc's encoding, which Node's stat returns). */
export function deviceNumbers(device: number): string {
  const value = BigInt(device)
  const major = ((value >> 8n) & 0xfffn) | ((value >> 32n) & ~0xfffn)
  const minor = (value & 0xffn) | ((value >> 12n) & ~0xffn)
  return `${major}:${minor}`
}
