import {
  closeSync,
  constants,
  type Dirent,
  fchmodSync,
  fchownSync,
  lchownSync,
  lstatSync,
  openSync,
  readdirSync,
  readlinkSync,
  type Stats,
  unlinkSync,
} from 'node:fs'
import { readProcessTable } from './process-table.js'

/**
 * Making a sandbox's host-visible outputs safe to hand to other tools, and
 * to the host's users, once the sandbox has ended.
 *
 * A writable host directory is the sandbox user's to shape while it runs: it
 * can leave FIFOs (a host tool that opens one blocks forever), sockets,
 * symbolic links that lead out (a host tool that follows links, running as
 * root, reads `/etc/shadow` through one), and files or directories with the
 * setuid or setgid bit (a setuid program of the sandbox's uid). Device files
 * cannot appear: the sandbox has no CAP_MKNOD. When the agent ends, by any
 * route (the host destroying the sandbox, the host dying, the lifetime), it
 * first kills every process of the sandbox's user, so nothing can add a trap
 * or move a path behind it, then walks each such directory and removes what
 * a host tool could trip on. What stays: regular files and directories
 * without set-id bits, and symbolic links that resolve inside the directory.
 * Names stay as they were: they may hold any byte but `/` and NUL, newlines
 * and terminal escapes included.
 *
 * A link is judged by where the kernel would take it, not by its text: its
 * target is resolved component by component from the link's own directory,
 * every link met on the way expanded in turn (a chain of `l1 -> l0/..`
 * climbs out although each text alone stays in), and the link is removed if
 * the walk ever leaves the directory, meets an absolute target, or loops.
 * A component that does not exist is taken as a directory that might (a
 * host tool could create it later), so a dangling `a/../../x` is removed too.
 *
 * Then the hand-over: everything the sandbox's user owns there is given to
 * the directory's owner (or to the owner the host named), so that a host
 * user can read, move and remove every output without privileges; the
 * sandbox ran as a uid of its own that no host account has.
 *
 * The walk runs as the agent (root, with CAP_DAC_OVERRIDE to read every
 * directory whatever its modes, CAP_FOWNER to change what the user owns,
 * CAP_CHOWN to hand it over). Each directory is opened through its parent's
 * descriptor without following links, and each change is made through a
 * descriptor or a no-follow call on a name in an open directory, so even a
 * process that outlived the kill could not turn a change onto another path.
 */

/** What a seal changed, for the agent's log. */
export interface SealReport {
  readonly removed: number
  readonly modesCleared: number
  readonly handedOver: number
  readonly failures: number
}

/** One writable directory to seal, and who gets what the sandbox left in it. */
export interface SealRoot {
  readonly root: string
  /** The owner to give the user's entries; undefined: the directory's own owner. */
  readonly handOverTo?: { readonly uid: number; readonly gid: number }
}

export interface SealOptions {
  /** The sandbox's user: its entries are handed over. */
  readonly uid: number
}

const SET_ID_BITS = 0o6000
/** Passes over `/proc` before the agent gives up on processes that keep forking. */
const MAX_KILL_PASSES = 50
/** Links followed while judging one (the kernel's own limit, ELOOP, is 40). */
const MAX_LINK_HOPS = 40
const OPEN_DIRECTORY = constants.O_RDONLY | constants.O_DIRECTORY | constants.O_NOFOLLOW
/** For fchmod and fchown: never a link, and never blocking on a FIFO swapped in. */
const OPEN_ENTRY = constants.O_RDONLY | constants.O_NOFOLLOW | constants.O_NONBLOCK

/**
 * Sends SIGKILL to every process whose real uid is `uid` until none is left
 * (a process forking while it is killed shows up in the next pass; the
 * sandbox's process limit bounds how many there can be). The agent holds
 * CAP_KILL for this. Returns how many it killed.
 */
export function killProcessesOf(uid: number): number {
  let killed = 0
  for (let pass = 0; pass < MAX_KILL_PASSES; pass++) {
    const targets = readProcessTable().filter(
      (entry) => entry.uid === uid && entry.pid !== process.pid,
    )
    if (targets.length === 0) break
    for (const { pid } of targets) {
      try {
        process.kill(pid, 'SIGKILL')
        killed++
      } catch {
        // Gone in between.
      }
    }
  }
  return killed
}

interface OpenDirectory {
  readonly fd: number
  /** Names from the sealed root down to this directory. */
  readonly path: readonly string[]
  waitingChildren: number
}

interface Counts {
  removed: number
  modesCleared: number
  handedOver: number
  failures: number
}

/** Walks each root and removes or defuses every trap in it, then hands the user's entries over. */
export function sealOutputs(roots: readonly SealRoot[], options: SealOptions): SealReport {
  const counts: Counts = { removed: 0, modesCleared: 0, handedOver: 0, failures: 0 }
  for (const root of roots) {
    let owner: { uid: number; gid: number }
    try {
      const stats = lstatSync(root.root)
      owner = root.handOverTo ?? { uid: stats.uid, gid: stats.gid }
    } catch {
      counts.failures++
      continue
    }
    sealTree(root.root, { sandboxUid: options.uid, owner }, counts)
  }
  return counts
}

function sealTree(root: string, who: Parties, counts: Counts): void {
  const pending: Array<{ parent: OpenDirectory | undefined; name: string }> = [
    { parent: undefined, name: root },
  ]
  const links: Array<{ path: string[]; handsOver: boolean }> = []
  while (pending.length > 0) {
    const { parent, name } = pending.pop()!
    let fd: number
    try {
      fd = openSync(parent ? `/proc/self/fd/${parent.fd}/${name}` : name, OPEN_DIRECTORY)
    } catch {
      counts.failures++
      continue
    } finally {
      if (parent) release(parent)
    }
    const directory: OpenDirectory = {
      fd,
      path: parent ? [...parent.path, name] : [],
      waitingChildren: 1,
    }
    const at = `/proc/self/fd/${fd}/`
    let entries: Dirent[] = []
    try {
      entries = readdirSync(at, { withFileTypes: true })
    } catch {
      counts.failures++
    }
    for (const entry of entries) {
      const path = at + entry.name
      try {
        const stats = lstatSync(path)
        if (stats.isSymbolicLink()) {
          // Judged once the walk is done, all against the tree as the sandbox left it.
          links.push({ path: [...directory.path, entry.name], handsOver: handsOver(stats, who) })
          continue
        }
        if (!stats.isFile() && !stats.isDirectory()) {
          // FIFOs and sockets (device files cannot be made without CAP_MKNOD).
          unlinkSync(path)
          counts.removed++
          continue
        }
        if (stats.mode & SET_ID_BITS || handsOver(stats, who))
          defuseAndHandOver(path, stats, who, counts)
        if (stats.isDirectory()) {
          directory.waitingChildren++
          pending.push({ parent: directory, name: entry.name })
        }
      } catch {
        counts.failures++
      }
    }
    release(directory)
  }
  // Every link that resolves out is judged before any is removed, so the
  // verdicts do not depend on the order of the walk: a link kept only ever
  // passes through links that are kept (a link through one that leads out
  // leads out at the same step).
  //
  // Links are reached through their directory's descriptor, never by a
  // path joined from the root, which a deep tree makes longer than PATH_MAX;
  // and a link that cannot be judged is removed, not kept.
  const verdicts = links.map((link) => {
    try {
      const target = inDirectory(root, link.path.slice(0, -1), (directory) =>
        readlinkSync(`${directory}/${link.path.at(-1)}`),
      )
      return resolvesInside(root, link.path.slice(0, -1), target)
    } catch {
      counts.failures++
      return false
    }
  })
  links.forEach((link, index) => {
    try {
      inDirectory(root, link.path.slice(0, -1), (directory) => {
        const path = `${directory}/${link.path.at(-1)}`
        if (!verdicts[index]) {
          unlinkSync(path)
          counts.removed++
        } else if (link.handsOver) {
          lchownSync(path, who.owner.uid, who.owner.gid)
          counts.handedOver++
        }
      })
    } catch {
      counts.failures++
    }
  })
}

/**
 * Runs `use` with a short path naming the directory `components` below
 * `root`, opened one name at a time through its parent's descriptor with no
 * link followed: however deep the tree, no path passed to the kernel grows
 * past a name. Throws what opening a component threw (ENOENT, ENOTDIR for a
 * component that is missing or not a directory, ELOOP for a link).
 */
function inDirectory<T>(
  root: string,
  components: readonly string[],
  use: (directory: string) => T,
): T {
  let fd = openSync(root, OPEN_DIRECTORY)
  try {
    for (const name of components) {
      const next = openSync(`/proc/self/fd/${fd}/${name}`, OPEN_DIRECTORY)
      closeSync(fd)
      fd = next
    }
    return use(`/proc/self/fd/${fd}`)
  } finally {
    closeSync(fd)
  }
}

interface Parties {
  readonly sandboxUid: number
  readonly owner: { readonly uid: number; readonly gid: number }
}

/** The user's entries change hands, unless the user already is the owner (a host that set `user` so). */
function handsOver(stats: Stats, who: Parties): boolean {
  return (
    stats.uid === who.sandboxUid && (stats.uid !== who.owner.uid || stats.gid !== who.owner.gid)
  )
}

function release(directory: OpenDirectory): void {
  directory.waitingChildren--
  if (directory.waitingChildren === 0) closeSync(directory.fd)
}

/** Clears set-id bits and gives the entry to its new owner, through a descriptor on it. */
function defuseAndHandOver(path: string, stats: Stats, who: Parties, counts: Counts): void {
  const fd = openSync(path, OPEN_ENTRY)
  try {
    if (stats.mode & SET_ID_BITS) {
      fchmodSync(fd, stats.mode & 0o1777)
      counts.modesCleared++
    }
    if (handsOver(stats, who)) {
      fchownSync(fd, who.owner.uid, who.owner.gid)
      counts.handedOver++
    }
  } finally {
    closeSync(fd)
  }
}

/**
 * Whether a link in the directory `linkDirectory` (names from the root)
 * with this target resolves inside the root, as the kernel would resolve it
 * now, or later once missing components are made.
 */
export function resolvesInside(root: string, linkDirectory: string[], target: string): boolean {
  if (target.startsWith('/')) return false
  const at = linkDirectory
  const remaining = target.split('/')
  let hops = 0
  while (remaining.length > 0) {
    const part = remaining.shift()!
    if (part === '' || part === '.') continue
    if (part === '..') {
      if (at.length === 0) return false
      at.pop()
      continue
    }
    let next: string | undefined
    try {
      next = inDirectory(root, at, (directory) => {
        const path = `${directory}/${part}`
        return lstatSync(path).isSymbolicLink() ? readlinkSync(path) : undefined
      })
    } catch (error) {
      // Missing, or under something that is not a directory: taken as a
      // directory that may appear. Anything else cannot be judged: out.
      const code = (error as NodeJS.ErrnoException).code
      if (code !== 'ENOENT' && code !== 'ENOTDIR') return false
    }
    if (next === undefined) {
      at.push(part)
      continue
    }
    // A link met on the way resolves from its own directory, which is `at`.
    if (++hops > MAX_LINK_HOPS || next.startsWith('/')) return false
    remaining.unshift(...next.split('/'))
  }
  return true
}
