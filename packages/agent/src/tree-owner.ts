import { closeSync, constants, lchownSync, lstatSync, openSync, readdirSync } from 'node:fs'

const OPEN_DIRECTORY = constants.O_RDONLY | constants.O_DIRECTORY | constants.O_NOFOLLOW

/** An open directory, closed once no child waits to be opened through it. */
interface Held {
  readonly fd: number
  waiting: number
}

/**
 * Hands every entry under each root (the root included) to `owner`, so that
 * a sandbox whose user has a uid of its own can write a persistent volume an
 * earlier sandbox, of another uid, filled. Links are re-owned, never
 * followed (lchown), and the walk stays on the root's filesystem. It runs as
 * root before any process of the sandbox starts, so nothing moves under it;
 * the kernel clears set-user-id and set-group-id bits on a file whose owner
 * changes, so nothing an earlier sandbox left runs with its rights. Entries
 * already the owner's are left alone. Resolves to the number re-owned.
 *
 * Each directory is opened through its parent's descriptor and its entries
 * are named through its own (`/proc/self/fd/<n>/<name>`), as the output
 * seal walks: an earlier sandbox can make a tree deeper than PATH_MAX one
 * `cd` at a time, and a walk by full paths failed there (ENAMETOOLONG),
 * which kept every later sandbox mounting the volume from starting.
 */
export async function handTreesTo(
  roots: readonly string[],
  owner: { readonly uid: number; readonly gid: number },
): Promise<number> {
  let handed = 0
  const handOver = (path: string, uid: number, gid: number): void => {
    if (uid === owner.uid && gid === owner.gid) return
    lchownSync(path, owner.uid, owner.gid)
    handed++
  }
  const release = (held: Held): void => {
    held.waiting--
    if (held.waiting === 0) closeSync(held.fd)
  }
  for (const root of roots) {
    const top = lstatSync(root)
    handOver(root, top.uid, top.gid)
    if (!top.isDirectory()) continue
    const pending: Array<{ parent: Held | undefined; name: string }> = [
      { parent: undefined, name: root },
    ]
    while (pending.length > 0) {
      const { parent, name } = pending.pop()!
      let fd: number
      try {
        fd = openSync(parent ? `/proc/self/fd/${parent.fd}/${name}` : name, OPEN_DIRECTORY)
      } finally {
        if (parent) release(parent)
      }
      const held: Held = { fd, waiting: 1 }
      try {
        const at = `/proc/self/fd/${fd}/`
        for (const entry of readdirSync(at)) {
          const stats = lstatSync(at + entry)
          if (stats.dev !== top.dev) continue
          handOver(at + entry, stats.uid, stats.gid)
          if (stats.isDirectory()) {
            held.waiting++
            pending.push({ parent: held, name: entry })
          }
        }
      } finally {
        release(held)
      }
    }
  }
  return handed
}
