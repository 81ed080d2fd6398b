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
import { type DirectoryNode, DirectoryTree, LinkJudge } from './link-verdicts.js'

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
  /** Whether judging ran past its time, so that later links were judged by their text. */
  readonly judgedByText: boolean
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
  /** Each tree's links are judged by where they resolve for this long after its walk; default 5 s. */
  readonly preciseJudgingMs?: number
}

const SET_ID_BITS = 0o6000
/**
 * How long a tree's links are judged by where they resolve, from the end of
 * its walk; later ones by their text alone (link-verdicts.ts).
 */
const PRECISE_JUDGING_MS = 5_000
const OPEN_DIRECTORY = constants.O_RDONLY | constants.O_DIRECTORY | constants.O_NOFOLLOW
/** For fchmod and fchown: never a link, and never blocking on a FIFO swapped in. */
const OPEN_ENTRY = constants.O_RDONLY | constants.O_NOFOLLOW | constants.O_NONBLOCK

interface OpenDirectory {
  readonly fd: number
  readonly node: DirectoryNode
  waitingChildren: number
}

interface Counts {
  removed: number
  modesCleared: number
  handedOver: number
  failures: number
  judgedByText: boolean
}

/** Walks each root and removes or defuses every trap in it, then hands the user's entries over. */
export function sealOutputs(roots: readonly SealRoot[], options: SealOptions): SealReport {
  const counts: Counts = {
    removed: 0,
    modesCleared: 0,
    handedOver: 0,
    failures: 0,
    judgedByText: false,
  }
  for (const root of roots) {
    let owner: { uid: number; gid: number }
    try {
      const stats = lstatSync(root.root)
      owner = root.handOverTo ?? { uid: stats.uid, gid: stats.gid }
    } catch {
      counts.failures++
      continue
    }
    sealTree(
      root.root,
      { sandboxUid: options.uid, owner },
      counts,
      options.preciseJudgingMs ?? PRECISE_JUDGING_MS,
    )
  }
  return counts
}

function sealTree(root: string, who: Parties, counts: Counts, preciseJudgingMs: number): void {
  const tree = new DirectoryTree(root)
  try {
    const links = walkTree(tree, who, counts)
    // Every link that resolves out is judged before any is removed, so the
    // verdicts do not depend on the order of the walk: a link kept only ever
    // passes through links that are kept (a link through one that leads out
    // leads out at the same step). Links are reached through their
    // directory's descriptor (link-verdicts.ts), never by a path joined from
    // the root, which a deep tree makes longer than PATH_MAX; and a link that
    // cannot be judged is removed, not kept.
    const judge = new LinkJudge(tree, performance.now() + preciseJudgingMs)
    const verdicts = links.map((link) => {
      try {
        const target = readlinkSync(`${tree.pathOf(link.directory)}/${link.name}`)
        return judge.resolvesInside(link.directory, target)
      } catch {
        counts.failures++
        return false
      }
    })
    if (judge.pastDeadline) counts.judgedByText = true
    links.forEach((link, index) => {
      try {
        const path = `${tree.pathOf(link.directory)}/${link.name}`
        if (!verdicts[index]) {
          unlinkSync(path)
          counts.removed++
        } else if (link.handsOver) {
          lchownSync(path, who.owner.uid, who.owner.gid)
          counts.handedOver++
        }
      } catch {
        counts.failures++
      }
    })
  } finally {
    tree.close()
  }
}

interface FoundLink {
  readonly directory: DirectoryNode
  readonly name: string
  readonly handsOver: boolean
}

/**
 * Walks the tree once: removes FIFOs and sockets, defuses set-id bits and
 * hands entries over as it goes; returns the links, to be judged once the
 * whole tree has been seen.
 */
function walkTree(tree: DirectoryTree, who: Parties, counts: Counts): FoundLink[] {
  const pending: Array<{ parent: OpenDirectory | undefined; node: DirectoryNode }> = [
    { parent: undefined, node: tree.top },
  ]
  const links: FoundLink[] = []
  while (pending.length > 0) {
    const { parent, node } = pending.pop()!
    let fd: number
    try {
      fd = openSync(parent ? `/proc/self/fd/${parent.fd}/${node.name}` : node.name, OPEN_DIRECTORY)
    } catch {
      counts.failures++
      continue
    } finally {
      if (parent) release(parent)
    }
    const directory: OpenDirectory = { fd, node, waitingChildren: 1 }
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
          links.push({ directory: node, name: entry.name, handsOver: handsOver(stats, who) })
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
          pending.push({ parent: directory, node: tree.child(node, entry.name) })
        }
      } catch {
        counts.failures++
      }
    }
    release(directory)
  }
  return links
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

/**
 * Clears set-id bits and gives the entry to its new owner. `path` names the
 * entry in an open directory's descriptor. An entry with no set-id bit is
 * handed over by one no-follow `lchown` of that name (under gVisor each call
 * to a host directory is a round trip to its file server: three calls an
 * entry made a seal of 100,000 files outlast the time the backend gave it);
 * set-id bits are cleared through a descriptor, since Linux has no
 * no-follow `chmod`.
 */
function defuseAndHandOver(path: string, stats: Stats, who: Parties, counts: Counts): void {
  if (!(stats.mode & SET_ID_BITS)) {
    lchownSync(path, who.owner.uid, who.owner.gid)
    counts.handedOver++
    return
  }
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
 * with this target resolves inside the root, judged with no deadline: the
 * model of the kernel the seal uses, for tests.
 */
export function resolvesInside(
  root: string,
  linkDirectory: readonly string[],
  target: string,
): boolean {
  const tree = new DirectoryTree(root)
  try {
    const directory = linkDirectory.reduce((node, name) => tree.child(node, name), tree.top)
    return new LinkJudge(tree, Number.POSITIVE_INFINITY).resolvesInside(directory, target)
  } finally {
    tree.close()
  }
}
