import { lchown, lstat, readdir } from 'node:fs/promises'
import { join } from 'node:path'

/**
 * Hands every entry under each root (the root included) to `owner`, so that
 * a sandbox whose user has a uid of its own can write a persistent volume an
 * earlier sandbox, of another uid, filled. Links are re-owned, never
 * followed (lchown), and the walk stays on the root's filesystem. It runs as
 * root before any process of the sandbox starts, so nothing moves under it;
 * the kernel clears set-user-id and set-group-id bits on a file whose owner
 * changes, so nothing an earlier sandbox left runs with its rights. Entries
 * already the owner's are left alone. Resolves to the number re-owned.
 */
export async function handTreesTo(
  roots: readonly string[],
  owner: { readonly uid: number; readonly gid: number },
): Promise<number> {
  let handed = 0
  for (const root of roots) {
    const top = await lstat(root)
    const pending: Array<{ path: string; isDirectory: boolean }> = [
      { path: root, isDirectory: top.isDirectory() },
    ]
    while (pending.length > 0) {
      const { path, isDirectory } = pending.pop()!
      const stats = await lstat(path)
      if (stats.dev !== top.dev) continue
      if (stats.uid !== owner.uid || stats.gid !== owner.gid) {
        await lchown(path, owner.uid, owner.gid)
        handed++
      }
      if (!isDirectory) continue
      for (const entry of await readdir(path, { withFileTypes: true }))
        pending.push({ path: join(path, entry.name), isDirectory: entry.isDirectory() })
    }
  }
  return handed
}
