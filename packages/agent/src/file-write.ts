import {
  closeSync,
  constants,
  fchmodSync,
  lstatSync,
  mkdirSync,
  openSync,
  renameSync,
  statSync,
  unlinkSync,
  writeSync,
  writevSync,
} from 'node:fs'
import { basename, dirname, isAbsolute, join, resolve } from 'node:path'
import { DirectoryHandles } from './directory-handles.js'
import { AgentOperationError } from './operation-error.js'
import type { PathJail } from './path-jail.js'
import type { FramedConnection } from './protocol/framed-connection.js'
import {
  parseClientMessage,
  type StagedPieceMessage,
  type WriteFileRequest,
} from './protocol/messages.js'
import { randomBytes } from './random-bytes.js'
import { PIECE_READ_BYTES, takeStagedPiece } from './staged-pieces.js'

/**
 * A file being received, made as the sandbox's user: a temporary file beside
 * its target, or (`direct`) the target itself, new, where nothing stood.
 */
interface Upload {
  fd: number
  /** Where the bytes go: a temporary name, or {@link real} itself when `direct`. */
  readonly temporary: string
  /** The target, or in a batch the target by name inside its checked directory (directory-handles.ts). */
  readonly real: string
  /** Created at its own name, in a directory this batch made: no rename to place it. */
  readonly direct: boolean
  readonly mode: number
  /** Whether the file was created with {@link mode} already, so no `fchmod` is needed. */
  readonly createdWithMode: boolean
  open: boolean
  placed: boolean
}

/**
 * Opens the temporary file of an upload to `path`; call it acting as the
 * sandbox's user (inside `jail.actAs`). Directories, the temporary file and
 * (later) the rename are made as that user, so what is written belongs to it
 * and goes only where it may write.
 *
 * `directories`, for a batch, maps each directory already made and resolved
 * in it (as the host named it) to its real path, so the next file there is
 * not resolved again, a `readlink` per path component that under gVisor is
 * a round trip through its kernel each. The file's own name is still looked
 * at (a link there is resolved and judged as usual), and the opened file's
 * real path is checked against the roots whichever way it was found.
 *
 * With `direct`, a file in a directory the batch made itself is created at
 * its own name, exclusively and without following a link there: nothing
 * stood there to replace, so the temporary name and the rename (and the
 * look at the name before) are spared, two system calls of six. Should the
 * sandbox have put something there meanwhile, the create fails and the file
 * takes the usual way. Only for a file whose bytes are all in hand, written
 * in one go: a stream would leave a partial file visible while it arrived.
 * `handles` holds the batch's directories opened and checked once: a file
 * (or its temporary file, and the rename) is made by name in its directory
 * as checked, so its own descriptor needs no check (one `readlink` fewer a
 * file); a link at the name takes the usual way. Only the small files of a
 * batch, placed before the next is opened: a directory stays open while
 * its file is in hand.
 */
function openUploadAsUser(
  jail: PathJail,
  path: string,
  requestedMode: number | undefined,
  directories?: Map<string, BatchDirectory>,
  handles?: DirectoryHandles,
): Upload {
  // As the host named it; a relative path is refused by the jail below.
  const named = isAbsolute(path) ? resolve(path) : undefined
  const known = named === undefined ? undefined : directories?.get(dirname(named))
  let real: string
  let fresh: boolean
  if (known !== undefined) {
    real = join(known.real, basename(named!))
    fresh = known.made
  } else {
    real = jail.resolveForWrite(path)
    const made = dirname(real)
    // Within one batch a directory is made and checked once: what the sandbox
    // may change meanwhile, the check of the opened file below still catches,
    // and everything here acts with the sandbox user's rights only.
    const first = mkdirSync(made, { recursive: true, mode: 0o755 })
    // The directories just made must still lead inside the roots.
    jail.resolveForWrite(made)
    fresh = first !== undefined && (made === first || made.startsWith(`${first}/`))
    if (named !== undefined) directories?.set(dirname(named), { real: made, made: fresh })
  }
  if (handles && fresh) {
    const mode = requestedMode ?? 0o644
    const createdWithMode = createsExactly(mode)
    // Created by name in its directory as opened and checked once for the
    // batch, it needs no check of its own (directory-handles.ts).
    const inChecked = handles.childPath(dirname(real), basename(real), path)
    const fd = createExclusive(inChecked ?? real, createdWithMode ? mode : 0o600)
    if (fd !== undefined) {
      const upload: Upload = {
        fd,
        temporary: real,
        real,
        direct: true,
        mode,
        createdWithMode,
        open: true,
        placed: false,
      }
      return inChecked === undefined ? checkedUpload(jail, path, upload) : upload
    }
  }
  let existing = lstatSync(real, { throwIfNoEntry: false })
  // The name itself, not a link there: its directory is the one resolved above.
  let inChecked = handles?.childPath(dirname(real), basename(real), path)
  if (existing?.isSymbolicLink()) {
    inChecked = undefined
    real = jail.resolveForWrite(path)
    existing = statSync(real, { throwIfNoEntry: false })
  }
  if (existing?.isDirectory())
    throw new AgentOperationError('bad-request', `${path} is a directory`)
  const mode = requestedMode ?? (existing ? existing.mode & 0o7777 : 0o644)
  const createdWithMode = createsExactly(mode)
  // In a batch, the temporary file is made and then renamed over the name
  // inside the directory as checked, so neither needs a check of its own.
  const { fd, temporary } = createTemporary(
    inChecked === undefined ? dirname(real) : dirname(inChecked),
    basename(real),
    createdWithMode ? mode : 0o600,
  )
  const upload: Upload = {
    fd,
    temporary,
    real: inChecked ?? real,
    direct: false,
    mode,
    createdWithMode,
    open: true,
    placed: false,
  }
  return inChecked === undefined ? checkedUpload(jail, path, upload) : upload
}

/** A directory a batch has made (or found) and resolved once. */
interface BatchDirectory {
  readonly real: string
  /** Whether this batch's `mkdir` made it: then no file of the batch can be there yet but the sandbox's own. */
  readonly made: boolean
}

/** `upload` once its opened file is known to lie inside the roots; removed and refused if not. */
function checkedUpload(jail: PathJail, path: string, upload: Upload): Upload {
  try {
    jail.checkOpened(upload.fd, path, 'write')
  } catch (error) {
    closeSync(upload.fd)
    upload.open = false
    unlinkSync(upload.temporary)
    throw error
  }
  return upload
}

/** Creates `path` if nothing is there (not even a link); `undefined` if something is. */
function createExclusive(path: string, mode: number): number | undefined {
  const flags = constants.O_WRONLY | constants.O_CREAT | constants.O_EXCL | constants.O_NOFOLLOW
  try {
    return openSync(path, flags, mode)
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === 'EEXIST') return undefined
    throw error
  }
}

/** The agent's umask, read once: what it strips from a mode given to `open`. */
const CREATION_UMASK = process.umask()

/**
 * Whether a file created with `mode` gets exactly that mode: permission bits
 * only (the kernel clears set-id bits when the file is then written, so
 * those are set after the write) and none the umask strips. Then the
 * `fchmod` before the rename is spared, a system call a file.
 */
function createsExactly(mode: number): boolean {
  return (mode & ~0o777) === 0 && (mode & CREATION_UMASK) === 0
}

/**
 * Temporary names: a random part chosen once per agent and a counter, not
 * random bytes read for every file (a system call each). The name hides
 * nothing from the sandbox's user, who can list the directory; what makes
 * it safe is `O_EXCL | O_NOFOLLOW`. A name the user made first is skipped
 * for a fresh random one.
 */
let temporaryBase = ''
let temporaryCount = 0

function createTemporary(
  directory: string,
  name: string,
  mode: number,
): { fd: number; temporary: string } {
  for (let attempt = 0; ; attempt++) {
    if (temporaryBase === '' || attempt > 0) temporaryBase = randomBytes(6).toString('hex')
    const temporary = join(directory, `.${name}.${temporaryBase}${temporaryCount++}.cordon-upload`)
    try {
      const flags = constants.O_WRONLY | constants.O_CREAT | constants.O_EXCL | constants.O_NOFOLLOW
      return { fd: openSync(temporary, flags, mode), temporary }
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code !== 'EEXIST' || attempt >= 3) throw error
    }
  }
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
  directories: Map<string, BatchDirectory>,
  handles: DirectoryHandles,
): void {
  jail.actAs(() => {
    for (const file of files) {
      const upload = openUploadAsUser(jail, file.path, file.mode, directories, handles)
      try {
        for (let offset = 0; offset < file.content.byteLength; )
          offset += writeSync(upload.fd, file.content, offset, file.content.byteLength - offset)
        if (!upload.createdWithMode) fchmodSync(upload.fd, upload.mode)
        closeSync(upload.fd)
        upload.open = false
        if (!upload.direct) renameSync(upload.temporary, upload.real)
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

/** Bytes of an upload gathered before they are written: sixteen frames. */
const GATHER_BYTES = 1024 * 1024

/**
 * An upload's incoming frames, written to its file in gathered writes
 * (`writev`) of up to {@link GATHER_BYTES} rather than one system call per
 * 64 KiB frame: under gVisor each system call is a round trip through its
 * kernel. The frames are referenced, not copied, so at most that much of
 * the connection's memory is held; a caller flushes before it places the
 * file. Written synchronously, as single frames were: a trip through the
 * thread pool costs more than the write into the sandbox's tmpfs.
 */
class GatheredWrites {
  private chunks: Uint8Array[] = []
  private bytes = 0

  constructor(private readonly upload: Upload) {}

  /** The upload's descriptor, for what is written besides the frames (staged pieces). */
  get fd(): number {
    return this.upload.fd
  }

  add(data: Uint8Array): void {
    this.chunks.push(data)
    this.bytes += data.byteLength
    if (this.bytes >= GATHER_BYTES) this.flush()
  }

  flush(): void {
    if (this.chunks.length === 0) return
    const { chunks, bytes } = this
    this.chunks = []
    this.bytes = 0
    let written = writevSync(this.upload.fd, chunks)
    if (written === bytes) return
    // A short write (a size limit or a full file system reached): the rest
    // one write at a time, so that the error which stops it is thrown.
    for (const chunk of chunks) {
      if (written >= chunk.byteLength) {
        written -= chunk.byteLength
        continue
      }
      for (let offset = written; offset < chunk.byteLength; )
        offset += writeSync(this.upload.fd, chunk, offset, chunk.byteLength - offset)
      written = 0
    }
  }
}

/**
 * Takes an upload's staged pieces (staged-pieces.ts) on one connection: each
 * is written after the frames gathered before it, so the file's bytes stay
 * in order, and answered with `staged-taken`, which is what lets the host
 * stage the next without filling the stage. One read buffer for the
 * connection, made at its first piece.
 */
class StagedPieceTaker {
  private buffer: Buffer | undefined

  constructor(
    private readonly connection: FramedConnection,
    private readonly stage: string | undefined,
  ) {}

  async take(message: StagedPieceMessage, writes: GatheredWrites): Promise<void> {
    if (this.stage === undefined)
      throw new AgentOperationError('bad-request', 'this agent has no stage for pieces')
    writes.flush()
    this.buffer ??= Buffer.allocUnsafeSlow(PIECE_READ_BYTES)
    takeStagedPiece(this.stage, message.name, message.bytes, writes.fd, this.buffer)
    await this.connection.send({ type: 'staged-taken' })
  }
}

/** Puts a complete upload in place: its mode, then an atomic rename over the target. */
function placeUpload(jail: PathJail, upload: Upload): void {
  jail.actAs(() => {
    if (!upload.createdWithMode) fchmodSync(upload.fd, upload.mode)
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
 *
 * With a `stage` (a gVisor sandbox's host-backed directory, staged-pieces.ts)
 * the host may hand over pieces as files there instead (`staged`), in order
 * with the data frames (see StagedPieceTaker).
 */
export async function serveWriteFile(
  connection: FramedConnection,
  request: WriteFileRequest,
  jail: PathJail,
  stage?: string,
): Promise<void> {
  const upload = openUpload(jail, request.path, request.mode)
  const writes = new GatheredWrites(upload)
  const pieces = new StagedPieceTaker(connection, stage)
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
        writes.add(frame.data)
        continue
      }
      const message = parseClientMessage(frame.message)
      if (message.type === 'staged') {
        received += message.bytes
        if (request.size !== undefined && received > request.size) {
          throw new AgentOperationError(
            'size-mismatch',
            `received more than the declared ${request.size} bytes`,
          )
        }
        await pieces.take(message, writes)
        continue
      }
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
      writes.flush()
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
 * A large file's bytes may come as staged pieces too (see
 * {@link serveWriteFile}), in order with its data frames.
 */
export async function serveWriteFiles(
  connection: FramedConnection,
  jail: PathJail,
  stage?: string,
): Promise<void> {
  await connection.send({ type: 'write-ready' })
  let bytes = 0
  let files = 0
  // A large file streams to disk as it arrives; small ones gather in memory and are written together.
  let upload: { file: Upload; writes: GatheredWrites } | undefined
  let gathering:
    | { path: string; mode: number | undefined; content: Uint8Array; filled: number }
    | undefined
  let pending: Array<{ path: string; mode: number | undefined; content: Uint8Array }> = []
  let pendingBytes = 0
  let remaining = 0
  const pieces = new StagedPieceTaker(connection, stage)
  // The directories the batch's small files went to, for the whole batch: a
  // directory it made stays one whose files it may create at their names.
  const directories = new Map<string, BatchDirectory>()
  const handles = new DirectoryHandles(jail, 'write')
  const flush = () => {
    if (pending.length === 0) return
    writeWholeFiles(jail, pending, directories, handles)
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
        } else upload!.writes.add(frame.data)
        remaining -= frame.data.byteLength
        bytes += frame.data.byteLength
      } else {
        const message = parseClientMessage(frame.message)
        if (message.type === 'staged') {
          // A large file's bytes as a staged piece (see serveWriteFile).
          if (!upload)
            throw new AgentOperationError('bad-request', 'a staged piece outside a large file')
          if (message.bytes > remaining)
            throw new AgentOperationError('size-mismatch', 'more bytes than the file declared')
          await pieces.take(message, upload.writes)
          remaining -= message.bytes
          bytes += message.bytes
        } else {
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
            const file = openUpload(jail, message.path, message.mode)
            upload = { file, writes: new GatheredWrites(file) }
          }
        }
      }
      if (remaining > 0) continue
      if (gathering) {
        pending.push(gathering)
        pendingBytes += gathering.content.byteLength
        gathering = undefined
        if (pending.length >= MAX_GATHERED_FILES || pendingBytes >= MAX_GATHERED_BYTES) flush()
      } else if (upload) {
        upload.writes.flush()
        placeUpload(jail, upload.file)
        upload = undefined
        files++
      }
    }
  } finally {
    handles.close()
    if (upload) abandonUpload(jail, upload.file)
  }
}

/** Files up to this size are gathered in memory and written whole. */
const SMALL_FILE_BYTES = 64 * 1024
/** Gathered files are written once there are this many of them, or this many bytes. */
const MAX_GATHERED_FILES = 256
const MAX_GATHERED_BYTES = 4 * 1024 * 1024
