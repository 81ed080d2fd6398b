import { closeSync, fstatSync, readSync } from 'node:fs'
import { join, relative, resolve } from 'node:path'
import { DirectoryHandles } from './directory-handles.js'
import { walk } from './file-list.js'
import { FilePrefetch } from './file-prefetch.js'
import { openListedFile } from './listed-file.js'
import { AgentOperationError } from './operation-error.js'
import type { PathJail } from './path-jail.js'
import type { FramedConnection } from './protocol/framed-connection.js'
import {
  type BatchEntryMessage,
  parseClientMessage,
  type ReadFilesRequest,
} from './protocol/messages.js'

const ENTRIES_PER_MESSAGE = 256
/** Files are read in groups of at most this many files or bytes, within one switch to the user. */
const GROUP_FILES = 128
const GROUP_BYTES = 4 * 1024 * 1024

/**
 * Sends every regular file under a directory on one connection: first the
 * listing (as `list-files` does), so the client can refuse a file larger
 * than it accepts before any is read; then, once the client says `proceed`,
 * each file as a `file-begin` with its size and that many bytes. Files are
 * opened and read as the sandbox's user, several within one switch of the
 * agent's ids (what a small file costs most). A file that disappeared, or
 * became a link, a directory or a socket since the listing, is left out;
 * one that grew or shrank is sent as it is now, at most its listed size
 * (and a FIFO the sandbox put in its place, as its non-blocking read gives).
 * Where the client asked (`readWhileListing`), small files are read during
 * the listing instead and sent as they were then (file-prefetch.ts).
 */
export async function serveReadFiles(
  connection: FramedConnection,
  request: ReadFilesRequest,
  jail: PathJail,
): Promise<void> {
  const shownRoot = resolve(request.path)
  // Opened and checked by the walk, the directories are those the files are read in.
  const directories = new DirectoryHandles(jail, 'read')
  try {
    await serveListedFiles(connection, request, jail, shownRoot, directories)
  } finally {
    directories.close()
  }
}

/** The listing, then (once the host proceeds) the files, as {@link serveReadFiles} says. */
async function serveListedFiles(
  connection: FramedConnection,
  request: ReadFilesRequest,
  jail: PathJail,
  shownRoot: string,
  directories: DirectoryHandles,
): Promise<void> {
  const prefetch = request.readWhileListing ? new FilePrefetch(jail, directories) : undefined
  const { realRoot, entries } = jail.actAs(() => {
    const real = jail.resolveForRead(request.path)
    return { realRoot: real, entries: walk(real, shownRoot, directories, prefetch) }
  })
  for (let start = 0; start < entries.length; start += ENTRIES_PER_MESSAGE)
    await connection.send({
      type: 'entries',
      entries: entries.slice(start, start + ENTRIES_PER_MESSAGE),
    })
  await connection.send({ type: 'end' })
  const frame = await connection.read()
  if (!frame) return
  if (frame.kind !== 'message' || parseClientMessage(frame.message).type !== 'proceed')
    throw new AgentOperationError('bad-request', 'expected "proceed" after the listing')
  // A group is read while the one before it drains to the host, which is
  // then parsing and saving it: at most two groups are held.
  let previous: Promise<void> = Promise.resolve()
  for (let start = 0; start < entries.length; ) {
    const group: BatchEntryMessage[] = []
    let bytes = 0
    while (
      start < entries.length &&
      group.length < GROUP_FILES &&
      (group.length === 0 || bytes + entries[start]!.size <= GROUP_BYTES)
    ) {
      bytes += entries[start]!.size
      group.push(entries[start++]!)
    }
    const held = group.map((entry) => prefetch?.take(entry.path))
    // The switch to the user's ids is itself a dozen system calls: only for files still to read.
    const contents = held.every((content) => content !== undefined)
      ? held
      : jail.actAs(() =>
          group.map(
            (entry, index) =>
              held[index] ??
              readWhole(jail, directories, entry, join(realRoot, relative(shownRoot, entry.path))),
          ),
        )
    await previous
    // The group (at most GROUP_BYTES) leaves in one gathered write.
    previous = connection.gather(() =>
      contents.flatMap((content, index) =>
        content
          ? [
              connection.send({
                type: 'file-begin',
                path: group[index]!.path,
                size: content.byteLength,
              }),
              ...(content.byteLength > 0 ? [connection.sendData('file', content)] : []),
            ]
          : [],
      ),
    )
    // Awaited before the next group or the end; a failure meanwhile is thrown there.
    previous.catch(() => {})
  }
  await previous
  await connection.send({ type: 'end' })
}

/**
 * Reads one listed file whole, as the user, up to its listed size;
 * undefined if it is gone, or what stands there now cannot be opened or read
 * as a file (see {@link openListedFile}).
 */
function readWhole(
  jail: PathJail,
  directories: DirectoryHandles,
  entry: BatchEntryMessage,
  real: string,
): Buffer | undefined {
  const fd = openListedFile(jail, directories, real, entry.path)
  if (fd === undefined) return undefined
  try {
    // At most what was listed: the host sized its checks by the listing, and a
    // file the sandbox grows in between must not make either side allocate
    // more. No `fstat` first (a system call a file, a round trip through
    // gVisor's kernel): what is not a regular file by now fails the read
    // (a directory), was refused by the open (a socket), or, a FIFO put there
    // by the sandbox itself, reads what its non-blocking read gives.
    const content = Buffer.allocUnsafe(entry.size)
    // Listed empty: no read to fail, so what it is now is asked.
    if (content.byteLength === 0) return fstatSync(fd).isFile() ? content : undefined
    let filled = 0
    while (filled < content.byteLength) {
      const read = readSync(fd, content, filled, content.byteLength - filled, null)
      if (read === 0) break
      filled += read
    }
    return content.subarray(0, filled)
  } catch {
    return undefined
  } finally {
    closeSync(fd)
  }
}
