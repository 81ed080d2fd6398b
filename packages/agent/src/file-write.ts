import {
  closeSync,
  constants,
  fchmodSync,
  mkdirSync,
  openSync,
  renameSync,
  statSync,
  unlinkSync,
  write,
  writeSync,
} from 'node:fs'
import { basename, dirname, join } from 'node:path'
import { promisify } from 'node:util'
import { AgentOperationError } from './operation-error.js'
import type { PathJail } from './path-jail.js'
import type { FramedConnection } from './protocol/framed-connection.js'
import { parseClientMessage, type WriteFileRequest } from './protocol/messages.js'
import { randomBytes } from './random-bytes.js'

const writeToDescriptor = promisify(write)

/** A file being received: a temporary file beside its target, made as the sandbox's user. */
interface Upload {
  fd: number
  readonly temporary: string
  readonly real: string
  readonly mode: number
  open: boolean
  placed: boolean
}

/**
 * Opens the temporary file of an upload to `path`; call it acting as the
 * sandbox's user (inside `jail.actAs`). Directories, the temporary file and
 * (later) the rename are made as that user, so what is written belongs to it
 * and goes only where it may write.
 */
function openUploadAsUser(
  jail: PathJail,
  path: string,
  requestedMode: number | undefined,
  madeDirectories?: Set<string>,
): Upload {
  const real = jail.resolveForWrite(path)
  const directory = dirname(real)
  // Within one batch a directory is made and checked once: what the sandbox
  // may change meanwhile, the check of the opened file below still catches,
  // and everything here acts with the sandbox user's rights only.
  if (!madeDirectories?.has(directory)) {
    mkdirSync(directory, { recursive: true, mode: 0o755 })
    // The directories just made must still lead inside the roots.
    jail.resolveForWrite(directory)
    madeDirectories?.add(directory)
  }
  const existing = statSync(real, { throwIfNoEntry: false })
  if (existing?.isDirectory())
    throw new AgentOperationError('bad-request', `${path} is a directory`)
  const mode = requestedMode ?? (existing ? existing.mode & 0o7777 : 0o644)
  const temporary = join(
    directory,
    `.${basename(real)}.${randomBytes(6).toString('hex')}.cordon-upload`,
  )
  const fd = openSync(
    temporary,
    constants.O_WRONLY | constants.O_CREAT | constants.O_EXCL | constants.O_NOFOLLOW,
    0o600,
  )
  const upload = { fd, temporary, real, mode, open: true, placed: false }
  try {
    jail.checkOpened(fd, path, 'write')
  } catch (error) {
    closeSync(fd)
    upload.open = false
    unlinkSync(temporary)
    throw error
  }
  return upload
}

function openUpload(jail: PathJail, path: string, requestedMode: number | undefined): Upload {
  return jail.actAs(() => openUploadAsUser(jail, path, requestedMode))
}

/**
 * Writes small files whole, all within one switch to the sandbox's user.
 * The switch is what a small file costs most: changing a multi-threaded
 * process's ids makes every thread change them, so a batch does it once for
 * many files, not four times per file.
 */
function writeWholeFiles(
  jail: PathJail,
  files: ReadonlyArray<{ path: string; mode: number | undefined; content: Uint8Array }>,
): void {
  const madeDirectories = new Set<string>()
  jail.actAs(() => {
    for (const file of files) {
      const upload = openUploadAsUser(jail, file.path, file.mode, madeDirectories)
      try {
        for (let offset = 0; offset < file.content.byteLength; )
          offset += writeSync(upload.fd, file.content, offset, file.content.byteLength - offset)
        fchmodSync(upload.fd, upload.mode)
        closeSync(upload.fd)
        upload.open = false
        renameSync(upload.temporary, upload.real)
      } catch (error) {
        if (upload.open) closeSync(upload.fd)
        try {
          unlinkSync(upload.temporary)
        } catch {}
        throw error
      }
    }
  })
}

/** Chunks up to this size are written synchronously: a trip through the thread pool costs more. */
const SYNC_WRITE_BYTES = 64 * 1024

async function writeChunk(upload: Upload, data: Uint8Array): Promise<void> {
  if (data.byteLength <= SYNC_WRITE_BYTES) {
    for (let offset = 0; offset < data.byteLength; )
      offset += writeSync(upload.fd, data, offset, data.byteLength - offset)
    return
  }
  for (let offset = 0; offset < data.byteLength; ) {
    const { bytesWritten } = await writeToDescriptor(
      upload.fd,
      data,
      offset,
      data.byteLength - offset,
    )
    offset += bytesWritten
  }
}

/** Puts a complete upload in place: its mode, then an atomic rename over the target. */
function placeUpload(jail: PathJail, upload: Upload): void {
  jail.actAs(() => {
    fchmodSync(upload.fd, upload.mode)
    closeSync(upload.fd)
    upload.open = false
    renameSync(upload.temporary, upload.real)
  })
  upload.placed = true
}

/** Removes an upload that will not be placed; the target is left as it was. */
function abandonUpload(jail: PathJail, upload: Upload): void {
  if (upload.open) {
    closeSync(upload.fd)
    upload.open = false
  }
  if (upload.placed) return
  try {
    jail.actAs(() => unlinkSync(upload.temporary))
  } catch {
    // Already gone.
  }
}

/**
 * Receives a file in data frames and puts it in place atomically: bytes go to
 * a temporary file beside the target, which replaces the target only after
 * the end frame arrived and (with a declared size) the byte count matched. A
 * failed or abandoned upload leaves the old file untouched.
 */
export async function serveWriteFile(
  connection: FramedConnection,
  request: WriteFileRequest,
  jail: PathJail,
): Promise<void> {
  const upload = openUpload(jail, request.path, request.mode)
  try {
    await connection.send({ type: 'write-ready' })
    let received = 0
    for (;;) {
      const frame = await connection.read()
      if (!frame)
        throw new AgentOperationError(
          'size-mismatch',
          `the upload ended after ${received} bytes without an end frame`,
        )
      if (frame.kind === 'data') {
        if (frame.channel !== 'file')
          throw new AgentOperationError('bad-request', `unexpected data on ${frame.channel}`)
        received += frame.data.byteLength
        if (request.size !== undefined && received > request.size) {
          throw new AgentOperationError(
            'size-mismatch',
            `received more than the declared ${request.size} bytes`,
          )
        }
        await writeChunk(upload, frame.data)
        continue
      }
      const message = parseClientMessage(frame.message)
      if (message.type !== 'end')
        throw new AgentOperationError(
          'bad-request',
          `unexpected "${message.type}" during an upload`,
        )
      if (request.size !== undefined && received !== request.size) {
        throw new AgentOperationError(
          'size-mismatch',
          `received ${received} bytes, declared ${request.size}`,
        )
      }
      placeUpload(jail, upload)
      await connection.send({ type: 'write-done', bytes: received })
      return
    }
  } finally {
    abandonUpload(jail, upload)
  }
}

/**
 * Receives many files on one connection: for each, a `file-begin` with its
 * path, size and mode, then exactly that many bytes in data frames; then
 * `end`. Each file is placed atomically as soon as its bytes are in, as
 * {@link serveWriteFile} does, so a batch that fails part-way leaves the
 * files before the failure written and the failing one untouched. One
 * connection instead of one per file: no handshake or round trip per file.
 */
export async function serveWriteFiles(connection: FramedConnection, jail: PathJail): Promise<void> {
  await connection.send({ type: 'write-ready' })
  let bytes = 0
  let files = 0
  // A large file streams to disk as it arrives; small ones gather in memory and are written together.
  let upload: Upload | undefined
  let gathering:
    | { path: string; mode: number | undefined; content: Uint8Array; filled: number }
    | undefined
  let pending: Array<{ path: string; mode: number | undefined; content: Uint8Array }> = []
  let pendingBytes = 0
  let remaining = 0
  const flush = () => {
    if (pending.length === 0) return
    writeWholeFiles(jail, pending)
    files += pending.length
    pending = []
    pendingBytes = 0
  }
  try {
    for (;;) {
      const frame = await connection.read()
      if (!frame)
        throw new AgentOperationError('size-mismatch', 'the batch ended without an end frame')
      if (frame.kind === 'data') {
        if (frame.channel !== 'file' || (!upload && !gathering))
          throw new AgentOperationError('bad-request', 'data outside a file of the batch')
        if (frame.data.byteLength > remaining)
          throw new AgentOperationError('size-mismatch', 'more bytes than the file declared')
        if (gathering) {
          gathering.content.set(frame.data, gathering.filled)
          gathering.filled += frame.data.byteLength
        } else await writeChunk(upload!, frame.data)
        remaining -= frame.data.byteLength
        bytes += frame.data.byteLength
      } else {
        const message = parseClientMessage(frame.message)
        if (upload || gathering)
          throw new AgentOperationError(
            'size-mismatch',
            `"${message.type}" before the previous file's ${remaining} remaining bytes`,
          )
        if (message.type === 'end') {
          flush()
          await connection.send({ type: 'write-done', bytes, files })
          return
        }
        if (message.type !== 'file-begin')
          throw new AgentOperationError('bad-request', `unexpected "${message.type}" in a batch`)
        remaining = message.size
        if (message.size <= SMALL_FILE_BYTES) {
          gathering = {
            path: message.path,
            mode: message.mode,
            content: new Uint8Array(message.size),
            filled: 0,
          }
        } else {
          flush()
          upload = openUpload(jail, message.path, message.mode)
        }
      }
      if (remaining > 0) continue
      if (gathering) {
        pending.push(gathering)
        pendingBytes += gathering.content.byteLength
        gathering = undefined
        if (pending.length >= MAX_GATHERED_FILES || pendingBytes >= MAX_GATHERED_BYTES) flush()
      } else if (upload) {
        placeUpload(jail, upload)
        upload = undefined
        files++
      }
    }
  } finally {
    if (upload) abandonUpload(jail, upload)
  }
}

/** Files up to this size are gathered in memory and written whole. */
const SMALL_FILE_BYTES = 64 * 1024
/** Gathered files are written once there are this many of them, or this many bytes. */
const MAX_GATHERED_FILES = 256
const MAX_GATHERED_BYTES = 4 * 1024 * 1024
