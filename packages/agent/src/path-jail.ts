import { readlinkSync, realpathSync } from 'node:fs'
import { basename, dirname, isAbsolute, join, resolve, sep } from 'node:path'
import { type ActAs, actAsItself } from './user-identity.js'

/**
 * The C library's realpath: one call, where Node's JavaScript one makes a
 * system call per path component and caches nothing between calls. Every
 * file operation resolves its path and the roots, so this is most of what a
 * small file costs the agent.
 */
const realPath = realpathSync.native

/**
 * A path the host asked for lies outside the roots it may use. `reason` is
 * what goes back to the host, which names the path itself.
 */
export class PathRefusedError extends Error {
  constructor(
    readonly path: string,
    readonly reason: string,
  ) {
    super(`path "${path}" refused: ${reason}`)
    this.name = 'PathRefusedError'
  }
}

/**
 * Confines host file operations to configured roots.
 *
 * A path is judged by where it really leads: the deepest part of it that
 * exists is resolved with `realpath` (following every symbolic link), the
 * rest is appended, and the result must lie inside a root that is itself
 * resolved the same way. A link inside a root that points out of it is
 * therefore refused, and so is `..` however it is spelled. After opening, the
 * open descriptor's real path is checked again, so swapping a directory for a
 * link between the check and the open does not get through.
 *
 * Everything is synchronous, so that a file operation's path work runs
 * inside one {@link ActAs} switch to the sandbox user's ids (`actAs`).
 */
export class PathJail {
  constructor(
    readonly writeRoots: readonly string[],
    readonly readRoots: readonly string[],
    /** How path-based work acts as the sandbox's user (see user-identity.ts). */
    readonly actAs: ActAs = actAsItself,
  ) {}

  /** The roots' real paths, each resolved once it exists (see {@link realRoot}). */
  private readonly realRoots = new Map<string, string>()

  /**
   * A root's real path, resolved the first time it exists and kept from then
   * on: every check compares against the roots, and resolving each root again
   * for each of them was most of the system calls of a small file (about 30
   * `readlink`s; under gVisor each is a round trip through its kernel). The
   * roots are mount points the backend made (the sandbox's user cannot move a
   * mount point or write the directories above it), so their real paths do
   * not change. Were one moved anyway, what the kept path admits is only the
   * directory the root really was, and every candidate is still resolved
   * afresh: a link put in a root's place leads elsewhere and is refused.
   */
  private realRoot(root: string): string | undefined {
    const known = this.realRoots.get(root)
    if (known !== undefined) return known
    try {
      const real = realPath(root)
      this.realRoots.set(root, real)
      return real
    } catch {
      // A root that does not exist (yet) is nobody's path; it is looked up again next time.
      return undefined
    }
  }

  /** The real path `path` leads to, if it lies inside a read root. */
  resolveForRead(path: string): string {
    return this.resolveWithin(path, this.readRoots, 'read')
  }

  /** The real path `path` leads to, if it lies inside a write root. */
  resolveForWrite(path: string): string {
    return this.resolveWithin(path, this.writeRoots, 'write')
  }

  /**
   * Where the entry `path` names lies, without following its last component
   * (a link stays the link): its parent is resolved as {@link resolveForRead}
   * does and its name appended. The result must lie inside a root of
   * `access`; it may be a root itself.
   */
  resolveEntry(path: string, access: 'read' | 'write'): string {
    const roots = access === 'read' ? this.readRoots : this.writeRoots
    if (!isAbsolute(path)) throw new PathRefusedError(path, 'not an absolute path')
    const absolute = resolve(path)
    const parent = dirname(absolute)
    const real =
      parent === absolute ? absolute : join(realPathOfNearestAncestor(parent), basename(absolute))
    if (this.isInside(real, roots)) return real
    // A root named through a link of its own (the root's real path is elsewhere).
    const full = realPathOfNearestAncestor(absolute)
    if (this.isRoot(full, roots)) return full
    throw new PathRefusedError(
      path,
      `it is outside the ${access} roots (${roots.join(', ') || 'none'})`,
    )
  }

  /** Whether `real` (a resolved path) is one of the roots of `access` itself. */
  isRoot(real: string, roots: readonly string[]): boolean {
    return roots.some((root) => this.realRoot(root) === real)
  }

  /**
   * Checks that an open descriptor still refers to something inside the
   * roots; false if it could not be checked (no /proc). Call it as the agent itself: a process whose ids changed is not
   * dumpable, and its own `/proc/self/fd` is then root's.
   */
  checkOpened(fd: number, requested: string, access: 'read' | 'write'): boolean {
    let actual: string
    try {
      actual = readlinkSync(`/proc/self/fd/${fd}`)
    } catch {
      // Without /proc there is nothing more to check; the pre-open check stands.
      return false
    }
    if (!this.isInside(actual, access === 'read' ? this.readRoots : this.writeRoots)) {
      throw new PathRefusedError(requested, `it leads outside the ${access} roots`)
    }
    return true
  }

  private resolveWithin(path: string, roots: readonly string[], access: 'read' | 'write'): string {
    if (!isAbsolute(path)) throw new PathRefusedError(path, 'not an absolute path')
    const real = realPathOfNearestAncestor(resolve(path))
    if (!this.isInside(real, roots)) {
      throw new PathRefusedError(
        path,
        `it is outside the ${access} roots (${roots.join(', ') || 'none'})`,
      )
    }
    return real
  }

  private isInside(candidate: string, roots: readonly string[]): boolean {
    for (const root of roots) {
      const realRoot = this.realRoot(root)
      if (realRoot === undefined) continue
      if (
        candidate === realRoot ||
        candidate.startsWith(realRoot.endsWith(sep) ? realRoot : realRoot + sep)
      )
        return true
    }
    return false
  }
}

/** `realpath` of the deepest existing ancestor of `absolute`, with the missing tail appended. */
export function realPathOfNearestAncestor(absolute: string): string {
  const missing: string[] = []
  let current = absolute
  for (;;) {
    try {
      const real = realPath(current)
      return missing.length === 0 ? real : join(real, ...missing.reverse())
    } catch (error) {
      const code = (error as NodeJS.ErrnoException).code
      if (code !== 'ENOENT' && code !== 'ENOTDIR') throw error
      const parent = dirname(current)
      if (parent === current) return absolute
      missing.push(current.slice(parent === '/' ? 1 : parent.length + 1))
      current = parent
    }
  }
}
