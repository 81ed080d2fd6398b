import { type Dirent, lstatSync, readdirSync } from 'node:fs'
import { join, resolve } from 'node:path'
import type { PathJail } from './path-jail.js'
import type { FramedConnection } from './protocol/framed-connection.js'
import type { FileEntryMessage, ListFilesRequest } from './protocol/messages.js'

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
  const entries = jail.actAs(() => walk(jail.resolveForRead(request.path), resolve(request.path)))
  for (let start = 0; start < entries.length; start += ENTRIES_PER_MESSAGE)
    await connection.send({
      type: 'entries',
      entries: entries.slice(start, start + ENTRIES_PER_MESSAGE),
    })
  await connection.send({ type: 'end' })
}

/** Every regular file under `real`, reported under `shownRoot`; call it acting as the sandbox's user. */
export function walk(real: string, shownRoot: string): FileEntryMessage[] {
  const entries: FileEntryMessage[] = []
  const rootStat = lstatSync(real, { throwIfNoEntry: false })
  if (!rootStat?.isDirectory()) return entries
  const pending: Array<{ real: string; shown: string }> = [{ real, shown: shownRoot }]
  while (pending.length > 0) {
    const { real: directory, shown } = pending.pop()!
    let children: Dirent[]
    try {
      children = readdirSync(directory, { withFileTypes: true })
    } catch {
      continue
    }
    for (const child of children) {
      const childReal = join(directory, child.name)
      const childShown = join(shown, child.name)
      if (child.isDirectory()) pending.push({ real: childReal, shown: childShown })
      else if (child.isFile()) {
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
