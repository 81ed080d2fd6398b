import { closeSync, constants, lstatSync, openSync, readlinkSync } from 'node:fs'

/**
 * Judging the links of a sealed tree (output-seal.ts): whether each one
 * resolves inside the tree's root, as the kernel would resolve it.
 *
 * Why a tree of directory nodes. Each step of a resolution looks at one name
 * in one directory below the root. The seal first reached that directory by
 * opening every component from the root, so a link cost its depth times its
 * target's components in system calls: a sandbox that nested 300 directories
 * and left 60 links of `x/../` repeated 800 times kept its seal busy past
 * the ten seconds `destroy()` gave it, and the engine killed the agent
 * before a single link was removed (its `/etc/shadow` link among them).
 * Here each directory is opened once, through its parent's descriptor with
 * no link followed (a bounded number kept open, the rest reopened from the
 * nearest open ancestor), and each existing name is looked at once: the
 * whole judgement costs about the system calls of the walk that found the
 * links, plus the names their targets make up.
 *
 * Why a deadline. Even so, a sandbox can make judging as long as it likes
 * within the kernel's own limits (40 links a resolution, 4 KiB a target, as
 * many links as it has room for). Past the deadline, a link is judged by its
 * text alone: kept only if its target is relative and has no `..`. That
 * rule is sound on its own: such a link can only descend, and so can every
 * link kept beside it (each was kept by this rule, or resolved inside with
 * every other link present, never through one that leads out).
 */

const OPEN_DIRECTORY = constants.O_RDONLY | constants.O_DIRECTORY | constants.O_NOFOLLOW
/** Links followed while judging one (the kernel's own limit, ELOOP, is 40). */
export const MAX_LINK_HOPS = 40
/** Directory descriptors kept open between steps; the rest are reopened from an open ancestor. */
const MAX_OPEN_DIRECTORIES = 128
/** How many steps pass between two looks at the clock. */
const STEPS_PER_CLOCK_CHECK = 256

/** A directory below the root, found by name from its parent; opened when first needed. */
export interface DirectoryNode {
  readonly name: string
  readonly parent: DirectoryNode | undefined
  /** Open descriptor, or -1. */
  fd: number
  /** Why it could not be opened (ENOENT, ENOTDIR, ELOOP...), once it could not. */
  failure?: NodeJS.ErrnoException
  /** Subdirectories met so far, by name. */
  children?: Map<string, DirectoryNode>
  /** What each existing name here is, once looked at. */
  entries?: Map<string, Entry>
}

/** A name in a directory, as resolution needs it. */
type Entry =
  | { readonly kind: 'link'; readonly target: string }
  | { readonly kind: 'directory' }
  /** A file, FIFO or socket: a name under it cannot be looked up now. */
  | { readonly kind: 'other' }
  /** Absent, or its directory absent: a host tool could make it later. */
  | { readonly kind: 'missing' }

/** The directories below `root`, opened a name at a time; close() when done. */
export class DirectoryTree {
  readonly top: DirectoryNode
  /** Open nodes, least recently used first. */
  private readonly open = new Set<DirectoryNode>()

  constructor(root: string) {
    this.top = { name: root, parent: undefined, fd: -1 }
  }

  /** The subdirectory `name` of `node` (nothing is opened or checked yet). */
  child(node: DirectoryNode, name: string): DirectoryNode {
    node.children ??= new Map()
    let found = node.children.get(name)
    if (!found) {
      found = { name, parent: node, fd: -1 }
      node.children.set(name, found)
    }
    return found
  }

  /**
   * A short path naming `node`'s directory (`/proc/self/fd/<n>`), however
   * deep it is. Throws what opening one of its components threw: ENOENT or
   * ENOTDIR for one missing or not a directory, ELOOP for a link.
   */
  pathOf(node: DirectoryNode): string {
    return `/proc/self/fd/${this.descriptorOf(node)}`
  }

  /** What `name` is in `node`'s directory. Throws only for a failure other than a missing name. */
  entry(node: DirectoryNode, name: string): Entry {
    const known = node.entries?.get(name)
    if (known) return known
    let directory: string
    try {
      directory = this.pathOf(node)
    } catch (error) {
      if (isMissing(error)) return MISSING
      throw error
    }
    let found: Entry
    try {
      const stats = lstatSync(`${directory}/${name}`)
      found = stats.isSymbolicLink()
        ? { kind: 'link', target: readlinkSync(`${directory}/${name}`) }
        : stats.isDirectory()
          ? DIRECTORY
          : OTHER
    } catch (error) {
      if (!isMissing(error)) throw error
      found = MISSING
    }
    // Missing names are kept too (`x/../` repeated is one look, not 800):
    // each came from a target's text, which bounds them.
    node.entries ??= new Map()
    node.entries.set(name, found)
    return found
  }

  close(): void {
    for (const node of this.open) closeSync(node.fd)
    this.open.clear()
  }

  private descriptorOf(node: DirectoryNode): number {
    if (node.fd >= 0) {
      this.open.delete(node)
      this.open.add(node)
      return node.fd
    }
    // Up to the nearest open ancestor (or the root), then down a name at a
    // time: iterative, since a hostile tree can be deeper than the stack.
    const chain: DirectoryNode[] = []
    let from: DirectoryNode | undefined = node
    while (from && from.fd < 0) {
      if (from.failure) throw from.failure
      chain.push(from)
      from = from.parent
    }
    let parentPath = from ? `/proc/self/fd/${from.fd}` : undefined
    for (let index = chain.length - 1; index >= 0; index--) {
      const next = chain[index]!
      try {
        next.fd = openSync(parentPath ? `${parentPath}/${next.name}` : next.name, OPEN_DIRECTORY)
      } catch (error) {
        next.failure = error as NodeJS.ErrnoException
        throw error
      }
      this.remember(next)
      parentPath = `/proc/self/fd/${next.fd}`
    }
    return node.fd
  }

  private remember(node: DirectoryNode): void {
    this.open.add(node)
    if (this.open.size <= MAX_OPEN_DIRECTORIES) return
    // The least recently used goes; the one just opened is the newest, and
    // a descriptor stays valid whatever happens to its parent's.
    const oldest = this.open.values().next().value as DirectoryNode
    this.open.delete(oldest)
    closeSync(oldest.fd)
    oldest.fd = -1
  }
}

const MISSING: Entry = { kind: 'missing' }
const DIRECTORY: Entry = { kind: 'directory' }
const OTHER: Entry = { kind: 'other' }

function isMissing(error: unknown): boolean {
  const code = (error as NodeJS.ErrnoException).code
  return code === 'ENOENT' || code === 'ENOTDIR'
}

/** Judges links against one tree, precisely until `deadline` (a `performance.now()` time), by their text after. */
export class LinkJudge {
  private steps = 0
  private late = false

  constructor(
    private readonly tree: DirectoryTree,
    private readonly deadline: number,
  ) {}

  /** Whether the judging has run past its deadline (later verdicts went by the text). */
  get pastDeadline(): boolean {
    return this.late
  }

  /**
   * Whether a link in `directory` with this target resolves inside the root,
   * as the kernel would resolve it now, or later once missing components
   * are made.
   */
  resolvesInside(directory: DirectoryNode, target: string): boolean {
    if (target.startsWith('/')) return false
    if (this.late) return descendsOnly(target)
    // Where the walk is: a directory that exists, and how many made-up names below it.
    let at = directory
    let missingBelow = 0
    // Components still to take, the next one last.
    const remaining = target.split('/').reverse()
    let hops = 0
    while (remaining.length > 0) {
      if (this.steps++ % STEPS_PER_CLOCK_CHECK === 0 && performance.now() >= this.deadline) {
        this.late = true
        return descendsOnly(target)
      }
      const part = remaining.pop()!
      if (part === '' || part === '.') continue
      if (part === '..') {
        if (missingBelow > 0) missingBelow--
        else if (at.parent === undefined) return false
        else at = at.parent
        continue
      }
      if (missingBelow > 0) {
        missingBelow++
        continue
      }
      let entry: Entry
      try {
        entry = this.tree.entry(at, part)
      } catch {
        return false // Cannot be judged: out.
      }
      if (entry.kind === 'directory') at = this.tree.child(at, part)
      else if (entry.kind === 'link') {
        // A link met on the way resolves from its own directory, which is `at`.
        if (++hops > MAX_LINK_HOPS || entry.target.startsWith('/')) return false
        const expanded = entry.target.split('/')
        for (let index = expanded.length - 1; index >= 0; index--) remaining.push(expanded[index]!)
      } else {
        // Missing, or under something that is not a directory: taken as a
        // directory that may appear.
        missingBelow = 1
      }
    }
    return true
  }
}

/** A relative target with no `..`: whatever it meets, it can only go down. */
function descendsOnly(target: string): boolean {
  return !target.startsWith('/') && !target.split('/').includes('..')
}
