import { type Dirent, lstatSync, readdirSync } from 'node:fs'
import { join, resolve } from 'node:path'
import { DirectoryHandles } from './directory-handles.js'
import type { FilePrefetch } from './file-prefetch.js'
import type { PathJail } from './path-jail.js'
import type { FramedConnection } from './protocol/framed-connection.js'
import type { BatchEntryMessage, ListFilesRequest } from './protocol/messages.js'

const ENTRIES_PER_MESSAGE = 256

/**
 * Lists every regular file under a directory, recursively, without following
 * symbolic links, in batches. Paths are reported under the directory as the
 * client named it. A missing directory lists as empty. The walk runs as the
 * sandbox's user, so a directory it may not read lists as empty too.
 */
export async function serveListFiles(
  connection: FramedConnection,
  request: ListFilesRequest,
  jail: PathJail,
): Promise<void> {
  const directories = new DirectoryHandles(jail, 'read')
  let entries: BatchEntryMessage[]
  try {
    entries = jail.actAs(() =>
      walk(jail.resolveForRead(request.path), resolve(request.path), directories),
    )
  } finally {
    directories.close()
  }
  for (let start = 0; start < entries.length; start += ENTRIES_PER_MESSAGE)
    await connection.send({
      type: 'entries',
      entries: entries.slice(start, start + ENTRIES_PER_MESSAGE),
    })
  await connection.send({ type: 'end' })
}

/**
 * Every regular file under `real`, reported under `shownRoot`; call it
 * acting as the sandbox's user. Each directory is read inside it as
 * `directories` opened and checked it against the roots: one swapped for a
 * link, or moved out of the roots, since its parent was read is not walked
 * (without them, no `/proc`, by path). A file's size and time are looked
 * up by path: through the descriptor, each lookup is a walk of `/proc` in
 * gVisor's kernel, and a listing took about a tenth longer. What a batch
 * read sends is read in the directories opened here, whatever the sandbox
 * moved meanwhile. With `prefetch`, small files are read as they are
 * found, and listed by what was read (file-prefetch.ts).
 */
export function walk(
  real: string,
  shownRoot: string,
  directories?: DirectoryHandles,
  prefetch?: FilePrefetch,
): BatchEntryMessage[] {
  const entries: BatchEntryMessage[] = []
  const rootStat = lstatSync(real, { throwIfNoEntry: false })
  if (!rootStat?.isDirectory()) return entries
  const pending: Array<{ real: string; shown: string }> = [{ real, shown: shownRoot }]
  while (pending.length > 0) {
    const { real: directory, shown } = pending.pop()!
    let at = directory
    if (directories?.usable) {
      let held: string | undefined
      try {
        held = directories.directoryPath(directory, shown)
      } catch {
        continue
      }
      if (held !== undefined) at = held
      // Gone, or a link now, while the handles work: not walked.
      else if (directories.usable) continue
    }
    let children: Dirent[]
    try {
      children = readdirSync(at, { withFileTypes: true })
    } catch {
      continue
    }
    for (const child of children) {
      const childReal = join(directory, child.name)
      const childShown = join(shown, child.name)
      if (child.isDirectory()) pending.push({ real: childReal, shown: childShown })
      else if (child.isFile()) {
        const early = prefetch?.read(childReal, childShown)
        if (early === 'skip') continue
        if (early !== undefined) {
          entries.push({ path: childShown, ...early })
          continue
        }
        let info: ReturnType<typeof lstatSync>
        try {
          info = lstatSync(childReal)
        } catch {
          continue
        }
        if (!info?.isFile()) continue
        entries.push({ path: childShown, size: info.size, modifiedMs: Math.floor(info.mtimeMs) })
      }
    }
  }
  return entries
}
