import type { Dirent } from 'node:fs'
import { lstat, readdir } from 'node:fs/promises'
import { join, resolve } from 'node:path'
import type { PathJail } from './path-jail.js'
import type { FramedConnection } from './protocol/framed-connection.js'
import type { FileEntryMessage, ListFilesRequest } from './protocol/messages.js'

const ENTRIES_PER_MESSAGE = 256

/**
 * Lists every regular file under a directory, recursively, without following
 * symbolic links, in batches. Paths are reported under the directory as the
 * client named it. A missing directory lists as empty.
 */
export async function serveListFiles(
  connection: FramedConnection,
  request: ListFilesRequest,
  jail: PathJail,
): Promise<void> {
  const real = await jail.resolveForRead(request.path)
  let batch: FileEntryMessage[] = []
  const flush = async (): Promise<void> => {
    if (batch.length === 0) return
    const entries = batch
    batch = []
    await connection.send({ type: 'entries', entries })
  }
  const rootStat = await lstat(real).catch(() => undefined)
  if (rootStat?.isDirectory()) {
    const pending: Array<{ real: string; shown: string }> = [{ real, shown: resolve(request.path) }]
    while (pending.length > 0) {
      const { real: directory, shown } = pending.pop()!
      let children: Dirent[]
      try {
        children = await readdir(directory, { withFileTypes: true })
      } catch {
        continue
      }
      for (const child of children) {
        const childReal = join(directory, child.name)
        const childShown = join(shown, child.name)
        if (child.isDirectory()) pending.push({ real: childReal, shown: childShown })
        else if (child.isFile()) {
          const info = await lstat(childReal).catch(() => undefined)
          if (!info?.isFile()) continue
          batch.push({ path: childShown, size: info.size, modifiedMs: Math.floor(info.mtimeMs) })
          if (batch.length >= ENTRIES_PER_MESSAGE) await flush()
        }
      }
    }
  }
  await flush()
  await connection.send({ type: 'end' })
}
