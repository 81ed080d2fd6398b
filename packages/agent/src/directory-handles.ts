import { closeSync, constants, openSync } from 'node:fs'
import type { PathJail } from './path-jail.js'

/**
 * `O_PATH`, which Node does not export: a descriptor that names a directory
 * without the right to read it (a directory the user may only pass through
 * opens too). The same value on every Linux architecture cordon runs on
 * (x86-64, arm64).
 */
const O_PATH = 0o10000000

/**
 * How many directories a batch keeps open. A walk takes them one after
 * another; a host's batch may name files of many directories in turn.
 */
const KEPT_OPEN = 64

/**
 * A directory opened again, after it was closed to make room, for at least
 * one lookup in this many gives the handles up for the batch: opening and
 * checking one is two system calls, spared one a file.
 */
const REOPENS_WORTH_IT = 8

/**
 * The directories a batch opens its files in, each opened once and its
 * descriptor checked once against the roots; a file is then opened by name
 * inside that very directory (`/proc/self/fd/<dir>/<name>`, which the
 * kernel resolves from the descriptor, as `openat` would), never by a path
 * the sandbox could have redirected since. That spares each file the check
 * of its own descriptor: a `readlink` a file, a round trip through gVisor's
 * kernel, about a fifth of what a small file costs inside gVisor (bench/misses.md).
 *
 * A file's name is a single component (from the directory's listing, or the
 * last of the host's path) and is opened with `O_NOFOLLOW`, so it lies in
 * the checked directory. What the directory holds is the sandbox user's to
 * choose either way; the check says where the directory is, and a file is
 * opened only as the user. Anything this cannot do (no `/proc` to check a
 * descriptor, a directory swapped for a link, no `O_PATH`) answers
 * `undefined`, and the caller opens and checks the file on its own, as
 * without this.
 *
 * Call it acting as the sandbox's user, as the file work it serves.
 */
export class DirectoryHandles {
  /** Open directories by real path, the least recently used first. */
  private readonly open = new Map<string, number>()
  private unavailable = process.platform !== 'linux'
  private lookups = 0
  /** Directories closed to make room, and how many of them were needed again. */
  private readonly closedForRoom = new Set<string>()
  private reopens = 0

  constructor(
    private readonly jail: PathJail,
    private readonly access: 'read' | 'write',
  ) {}

  /** False once this batch cannot use them (no `/proc`, or given up): then every path is taken as it is. */
  get usable(): boolean {
    return !this.unavailable
  }

  /**
   * The path that names `name` inside the directory at `directory` (a real
   * path), opened and checked; `undefined` if the directory cannot be used
   * so. Throws the jail's refusal when the directory lies outside the roots
   * (`requested` is the path the host asked for, for the refusal's text).
   */
  childPath(directory: string, name: string, requested: string): string | undefined {
    if (name.includes('/') || name === '.' || name === '..') return undefined
    const held = this.directoryPath(directory, requested)
    return held === undefined ? undefined : `${held}/${name}`
  }

  /**
   * The directory at `directory` (a real path) as opened and checked,
   * `/proc/self/fd/<descriptor>`; `undefined` if it cannot be used so (see
   * {@link usable} for whether that is this directory or the batch).
   * Throws the jail's refusal when the directory lies outside the roots.
   */
  directoryPath(directory: string, requested: string): string | undefined {
    if (this.unavailable) return undefined
    this.lookups++
    let fd = this.open.get(directory)
    if (fd === undefined) {
      // Files from more directories in turn than are kept open: each would
      // cost more than it spares.
      if (this.closedForRoom.has(directory) && ++this.reopens * REOPENS_WORTH_IT > this.lookups) {
        this.unavailable = true
        this.close()
        return undefined
      }
      if (this.open.size >= KEPT_OPEN) {
        const [oldest, oldestFd] = this.open.entries().next().value as [string, number]
        this.open.delete(oldest)
        closeSync(oldestFd)
        this.closedForRoom.add(oldest)
      }
      fd = this.openChecked(directory, requested)
      if (fd === undefined) return undefined
      this.open.set(directory, fd)
    } else {
      this.open.delete(directory)
      this.open.set(directory, fd)
    }
    return `/proc/self/fd/${fd}`
  }

  /** Closes every directory kept open. */
  close(): void {
    for (const fd of this.open.values()) closeSync(fd)
    this.open.clear()
  }

  private openChecked(directory: string, requested: string): number | undefined {
    let fd: number
    try {
      fd = openSync(directory, O_PATH | constants.O_DIRECTORY | constants.O_NOFOLLOW)
    } catch {
      // Gone, or a link in its place since it was found: the file's own way judges it.
      return undefined
    }
    try {
      if (this.jail.checkOpened(fd, requested, this.access)) return fd
      // No /proc: nothing can be checked this way, for this batch or the next file.
      this.unavailable = true
    } catch (error) {
      closeSync(fd)
      throw error
    }
    closeSync(fd)
    return undefined
  }
}
