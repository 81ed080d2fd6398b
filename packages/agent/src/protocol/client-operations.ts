import { randomBytes } from 'node:crypto'
import type { Duplex } from 'node:stream'
import { computeAuthProof, verifyAgentProof } from './auth.js'
import { DEFAULT_MAX_FRAME_BYTES, type Frame } from './frame-codec.js'
import { ConnectionClosedError, type FramedConnection } from './framed-connection.js'
import {
  type AgentErrorCode,
  type AgentMessage,
  type BatchEntryMessage,
  type ExecRequest,
  type ExitMessage,
  type FileChangeMessage,
  type FileEntryMessage,
  type HealthOkMessage,
  type HelloMessage,
  type KillSignalName,
  PROTOCOL_REVISION,
  PROTOCOL_VERSION,
  type ProcessEntryMessage,
  ProtocolError,
  parseAgentMessage,
  type StatOkMessage,
  type UsageOkMessage,
} from './messages.js'
import { StagedSender, sendAsData, type UploadReply, type UploadStage } from './staged-sender.js'

/**
 * The client half of the protocol, independent of how the connection was
 * dialled (unix socket, vsock socket, TLS relay, TCP). Backends dial, then call
 * {@link authenticateToAgent} and one operation per connection.
 */

/** The agent answered a request with an error. */
export class AgentRemoteError extends Error {
  readonly code: AgentErrorCode

  constructor(code: AgentErrorCode, message: string) {
    super(message)
    this.name = 'AgentRemoteError'
    this.code = code
  }
}

/** Bytes written to a command's stdin after it closed it (it exited or stopped reading). */
export class AgentStdinClosedError extends Error {
  constructor() {
    super("the command's stdin is closed")
    this.name = 'AgentStdinClosedError'
  }
}

/**
 * The peer on the channel is not an agent holding the sandbox's secret: it
 * failed the agent's half of the handshake. Nothing was sent to it but the
 * client's own proof, which is of no use against another nonce.
 */
export class AgentImpostorError extends Error {
  constructor(message: string) {
    super(message)
    this.name = 'AgentImpostorError'
  }
}

/**
 * A request the agent at the other end is too old to serve: it announced an
 * earlier protocol revision than the request needs. Nothing was sent.
 */
export class AgentRevisionError extends Error {
  constructor(
    readonly request: string,
    readonly agentRevision: number,
    readonly needed: number,
  ) {
    super(
      `the sandbox's agent serves protocol revision ${agentRevision}; "${request}" needs ${needed} (update the agent in the sandbox's image or runtime)`,
    )
    this.name = 'AgentRevisionError'
  }
}

/** The revision each agent announced, by connection (see `PROTOCOL_REVISION`). */
const agentRevisions = new WeakMap<FramedConnection, number>()

/** Throws {@link AgentRevisionError} when the connection's agent announced less than `needed`. */
function requireRevision(connection: FramedConnection, request: string, needed = 1): void {
  const revision = agentRevisions.get(connection) ?? 0
  if (revision < needed) throw new AgentRevisionError(request, revision, needed)
}

export const DEFAULT_HEARTBEAT_MS = 5_000
/** Silence tolerated before the peer is considered gone, as a multiple of the heartbeat. */
export const IDLE_HEARTBEATS = 4

async function nextMessage(connection: FramedConnection): Promise<AgentMessage> {
  const frame = await connection.read()
  if (!frame) throw new ConnectionClosedError('the agent closed the connection')
  if (frame.kind !== 'message')
    throw new ProtocolError(`expected a message, got a data frame on ${frame.channel}`)
  return parseAgentMessage(frame.message)
}

function remoteOrUnexpected(message: AgentMessage, expected: string): Error {
  if (message.type === 'error') return new AgentRemoteError(message.code, message.message)
  return new ProtocolError(`expected "${expected}", got "${message.type}"`)
}

/**
 * Answers the agent's challenge with the secret's proof, checks the agent's
 * proof of the same secret against a challenge of its own, and starts
 * heartbeats. Rejects with {@link AgentRemoteError} (`unauthorized`) on a
 * wrong secret, and with {@link AgentImpostorError} when the peer is not an
 * agent that holds the secret (whatever it sent, the connection is closed
 * before any request goes to it).
 */
export async function authenticateToAgent(
  connection: FramedConnection,
  secret: string,
  options: { heartbeatMs?: number } = {},
): Promise<HelloMessage> {
  const hello = await nextMessage(connection)
  if (hello.type !== 'hello') throw remoteOrUnexpected(hello, 'hello')
  if (hello.protocol !== PROTOCOL_VERSION) {
    throw new ProtocolError(
      `agent speaks protocol ${hello.protocol}; this client speaks ${PROTOCOL_VERSION}`,
    )
  }
  const heartbeatMs = options.heartbeatMs ?? DEFAULT_HEARTBEAT_MS
  const nonce = randomBytes(32).toString('hex')
  await connection.send({
    type: 'auth',
    proof: computeAuthProof(secret, hello.nonce),
    nonce,
    heartbeatMs,
  })
  let reply: AgentMessage
  try {
    reply = await nextMessage(connection)
  } catch (error) {
    // A peer that answers the proof with something malformed is not an agent that knows the protocol.
    if (error instanceof ProtocolError) {
      connection.destroy()
      throw new AgentImpostorError(`the peer's answer to the proof is malformed: ${error.message}`)
    }
    throw error
  }
  if (reply.type !== 'auth-ok') throw remoteOrUnexpected(reply, 'auth-ok')
  if (!verifyAgentProof(secret, nonce, hello.nonce, reply.proof)) {
    connection.destroy()
    throw new AgentImpostorError('the peer did not prove it holds the sandbox secret')
  }
  connection.setMaxFrameBytes(DEFAULT_MAX_FRAME_BYTES)
  connection.startHeartbeat(heartbeatMs, heartbeatMs * IDLE_HEARTBEATS)
  agentRevisions.set(connection, Math.min(hello.revision ?? 0, PROTOCOL_REVISION))
  return hello
}

export async function requestHealth(connection: FramedConnection): Promise<HealthOkMessage> {
  await connection.send({ type: 'health' })
  const reply = await nextMessage(connection)
  if (reply.type !== 'health-ok') throw remoteOrUnexpected(reply, 'health-ok')
  connection.close()
  return reply
}

/**
 * Holds (`pause-clocks`) or releases (`resume-clocks`) the agent's deadlines
 * around a freeze of the sandbox; resolves with the time they were held.
 */
export async function requestClocks(
  connection: FramedConnection,
  type: 'pause-clocks' | 'resume-clocks',
): Promise<number> {
  requireRevision(connection, type, 2)
  await connection.send({ type })
  const reply = await nextMessage(connection)
  if (reply.type !== 'clocks-ok') throw remoteOrUnexpected(reply, 'clocks-ok')
  connection.close()
  return reply.heldMs
}

/**
 * Asks a stdio agent to drop its channel's session and wait for a resume
 * line (see `SuspendChannelRequest`); resolves once it has answered, which
 * is the last frame it sends on that session.
 *
 * With `waitForCloseMs`, it then waits (that long at most) for the agent to
 * close the connection. An agent with a host-backed listener closes that
 * listener and then its connections right after the answer, and gVisor cannot
 * checkpoint a sandbox whose listener is still bound on the host: the close of
 * this connection is the host's sign that the listener went first. Over the
 * engine's attach the agent drops its streams without a word, so the wait is
 * bounded.
 */
export async function requestSuspendChannel(
  connection: FramedConnection,
  options: { readonly refuseOpenTcp?: boolean; readonly waitForCloseMs?: number } = {},
): Promise<void> {
  requireRevision(connection, 'suspend-channel', 3)
  await connection.send({
    type: 'suspend-channel',
    ...(options.refuseOpenTcp ? { refuseOpenTcp: true } : {}),
  })
  const reply = await nextMessage(connection)
  if (reply.type !== 'channel-suspended') throw remoteOrUnexpected(reply, 'channel-suspended')
  if (options.waitForCloseMs !== undefined) await closedWithin(connection, options.waitForCloseMs)
  connection.close()
}

/** Resolves when the peer ends or drops `connection` (anything it still sends is dropped), or after `ms`. */
async function closedWithin(connection: FramedConnection, ms: number): Promise<void> {
  let timer: ReturnType<typeof setTimeout> | undefined
  const timedOut = new Promise<void>((resolve) => {
    timer = setTimeout(resolve, ms)
  })
  const ended = (async () => {
    for (;;) if ((await connection.read()) === undefined) return
  })().catch(() => {})
  try {
    await Promise.race([ended, timedOut])
  } finally {
    clearTimeout(timer)
  }
}

/**
 * Asks a detached agent whose host has gone to serve its session on this
 * connection (see `AdoptSessionRequest`); resolves with the connection's
 * stream once the agent has answered, the session multiplexer's bytes (if
 * the agent has already opened a stream) left unread in it. The connection
 * is let go of: it sends no heartbeat from before the request on, since a
 * frame of this protocol after it would break the session.
 */
export async function requestAdoptSession(connection: FramedConnection): Promise<Duplex> {
  requireRevision(connection, 'adopt-session', 4)
  connection.stopHeartbeat()
  await connection.send({ type: 'adopt-session' })
  const frame = await connection.readAndRelease()
  if (!frame) throw new ConnectionClosedError('the agent closed the connection')
  if (frame.kind !== 'message')
    throw new ProtocolError(`expected a message, got a data frame on ${frame.channel}`)
  const reply = parseAgentMessage(frame.message)
  if (reply.type !== 'session-adopted') {
    connection.socket.destroy()
    throw remoteOrUnexpected(reply, 'session-adopted')
  }
  return connection.socket
}

/**
 * Asks the agent to hold on to this host (see `HoldHostRequest`): resolves
 * once it has answered; from then on the connection carries heartbeats only,
 * and its close (or four heartbeats of this host's silence) starts the
 * agent's `graceMs` countdown to its end.
 */
export async function requestHoldHost(
  connection: FramedConnection,
  graceMs: number,
): Promise<void> {
  requireRevision(connection, 'hold-host', 5)
  await connection.send({ type: 'hold-host', graceMs })
  const reply = await nextMessage(connection)
  if (reply.type !== 'host-held') throw remoteOrUnexpected(reply, 'host-held')
}

export async function requestUsage(connection: FramedConnection): Promise<UsageOkMessage> {
  await connection.send({ type: 'usage' })
  const reply = await nextMessage(connection)
  if (reply.type !== 'usage-ok') throw remoteOrUnexpected(reply, 'usage-ok')
  connection.close()
  return reply
}

export async function requestSignalMarked(
  connection: FramedConnection,
  marker: string,
  signal: 'SIGKILL' | 'SIGTERM' | 'SIGHUP',
): Promise<number> {
  await connection.send({ type: 'signal-marked', marker, signal })
  const reply = await nextMessage(connection)
  if (reply.type !== 'signal-ok') throw remoteOrUnexpected(reply, 'signal-ok')
  connection.close()
  return reply.signalled
}

/**
 * Waits for the agent's `write-ready`, then listens for its next message
 * while the caller sends: the agent only speaks again to finish or to refuse,
 * so an early refusal (a path it may not write, a full disk, a size exceeded)
 * stops the upload. The one exception, `staged-taken` (the agent has a
 * staged piece, see {@link UploadStage}), is handed to `onTaken`.
 */
async function uploadReply(
  connection: FramedConnection,
  onTaken?: () => void,
): Promise<UploadReply> {
  const ready = await nextMessage(connection)
  if (ready.type !== 'write-ready') throw remoteOrUnexpected(ready, 'write-ready')
  const message = (async () => {
    for (;;) {
      const next = await nextMessage(connection)
      if (next.type !== 'staged-taken' || !onTaken) return next
      onTaken()
    }
  })()
  let settled = false
  message.then(
    () => {
      settled = true
    },
    () => {
      settled = true
    },
  )
  return { message, arrived: () => settled }
}

/** A streamed upload's source pieces are sent together once this many bytes are held. */
const UPLOAD_GATHER_BYTES = 1024 * 1024

/** A streamed download hands its consumer pieces of at most this many bytes (several frames). */
const DOWNLOAD_PIECE_BYTES = 1024 * 1024

/** Bytes per data frame of a batch upload. */
const BATCH_CHUNK_BYTES = 256 * 1024

/**
 * A batch file whose bytes are produced while the batch is sent (a host
 * file read as it goes): exactly `size` bytes from `pieces()`, which throws
 * if it cannot deliver them.
 */
export interface StreamedBatchContent {
  readonly size: number
  /**
   * All `size` bytes, read now, for a source small enough to read whole
   * without waiting (a small host file); absent or undefined otherwise.
   */
  readNow?(): Uint8Array | undefined
  pieces(): AsyncIterable<Uint8Array>
}

/** One file of a batch upload: its bytes in hand, or streamed. */
export interface BatchUploadFile {
  readonly path: string
  readonly content: Uint8Array | StreamedBatchContent
  readonly mode?: number
}

/**
 * Uploads many files on one connection (`write-files`): for each a
 * `file-begin` and its bytes, then `end`. Resolves with the files and bytes
 * the agent placed; an early refusal (a path it may not write, a full disk)
 * stops the upload and rejects. A streamed file is read only when its turn
 * comes, so its reading overlaps the agent's writing of the files before it;
 * one that fails to deliver its declared bytes ends the connection, which
 * the agent takes as the batch's end without that file.
 */
export async function requestWriteFiles(
  connection: FramedConnection,
  files: Iterable<BatchUploadFile>,
  options: { stage?: UploadStage | undefined } = {},
): Promise<{ files: number; bytes: number }> {
  // A large file's bytes go as staged pieces where there is a stage.
  const staging = stagedSender(connection, options.stage)
  await connection.send({ type: 'write-files' })
  const reply = await uploadReply(connection, staging?.taken)
  staging?.follow(reply)
  // Small files leave in groups, each one gathered write: the agent then
  // wakes and reads once for many files rather than once a file (under
  // gVisor each of its reads is a round trip through the sandbox's kernel).
  // A group is sent while the next one is gathered (a host file source reads
  // its bytes then), so at most two groups are held besides the socket's buffer.
  let group: Array<{ path: string; mode: number | undefined; bytes: Uint8Array }> = []
  let groupBytes = 0
  let groupInFlight: Promise<void> = Promise.resolve()
  const sendGroup = async () => {
    await groupInFlight
    if (group.length === 0) return
    const sending = group
    group = []
    groupBytes = 0
    groupInFlight = connection.gather(() =>
      sending.flatMap(({ path, mode, bytes }) => [
        connection.send({
          type: 'file-begin',
          path,
          size: bytes.byteLength,
          ...(mode === undefined ? {} : { mode }),
        }),
        connection.sendData('file', bytes),
      ]),
    )
    // Awaited by the next group or the batch's end; a failure meanwhile is theirs to throw.
    groupInFlight.catch(() => {})
  }
  try {
    for (const file of files) {
      if (reply.arrived()) break
      const content = file.content
      const inHand = content instanceof Uint8Array ? content : content.readNow?.()
      if (inHand && inHand.byteLength <= GROUPED_FILE_BYTES) {
        group.push({ path: file.path, mode: file.mode, bytes: inHand })
        groupBytes += inHand.byteLength
        if (groupBytes >= GROUP_BYTES || group.length >= GROUP_FILES) await sendGroup()
        continue
      }
      await sendGroup()
      await groupInFlight
      const size = inHand ? inHand.byteLength : (content as StreamedBatchContent).size
      await connection.send({
        type: 'file-begin',
        path: file.path,
        size,
        ...(file.mode === undefined ? {} : { mode: file.mode }),
      })
      if (staging) {
        if (inHand) await staging.add(inHand)
        else
          for await (const piece of streamedBatchPieces(
            file.path,
            content as StreamedBatchContent,
          )) {
            if (reply.arrived()) break
            await staging.add(piece)
          }
        await staging.flush()
      } else if (inHand) await sendBatchBytes(connection, inHand)
      else await sendStreamedBatchFile(connection, file.path, content as StreamedBatchContent)
    }
    if (!reply.arrived()) await sendGroup()
    // A group that failed to leave because the agent refused and hung up:
    // its refusal, once arrived, is the error to report.
    await groupInFlight.catch((error: unknown) => {
      if (!reply.arrived()) throw error
    })
    if (!reply.arrived()) await connection.send({ type: 'end' })
    const done = await reply.message
    if (done.type !== 'write-done') throw remoteOrUnexpected(done, 'write-done')
    connection.close()
    return { files: done.files ?? 0, bytes: done.bytes }
  } catch (error) {
    connection.destroy()
    if (staging) throw await stagedFailure(staging, reply, error)
    throw error
  }
}

/** A batch's files up to this size are sent in groups... */
const GROUPED_FILE_BYTES = 64 * 1024
/** ...of up to this many bytes or files, each group one gathered write. */
const GROUP_BYTES = 256 * 1024
const GROUP_FILES = 256

async function sendBatchBytes(connection: FramedConnection, bytes: Uint8Array): Promise<void> {
  for (let offset = 0; offset < bytes.byteLength; offset += BATCH_CHUNK_BYTES)
    await connection.sendData(
      'file',
      bytes.subarray(offset, Math.min(offset + BATCH_CHUNK_BYTES, bytes.byteLength)),
    )
}

/** Sends a streamed file's pieces, never more or fewer bytes than its `file-begin` declared. */
async function sendStreamedBatchFile(
  connection: FramedConnection,
  path: string,
  content: StreamedBatchContent,
): Promise<void> {
  for await (const piece of streamedBatchPieces(path, content))
    await sendBatchBytes(connection, piece)
}

/** A streamed file's pieces; throws where its source gives more or fewer bytes than declared. */
async function* streamedBatchPieces(
  path: string,
  content: StreamedBatchContent,
): AsyncGenerator<Uint8Array> {
  let sent = 0
  for await (const piece of content.pieces()) {
    if (sent + piece.byteLength > content.size)
      throw new Error(`${path}: its source gave more than the ${content.size} bytes declared`)
    yield piece
    sent += piece.byteLength
  }
  if (sent !== content.size)
    throw new Error(`${path}: its source gave ${sent} of the ${content.size} bytes declared`)
}

/** A `read-files` in progress: the listing, then the files once `proceed` is called. */
export interface AgentBatchDownload {
  readonly entries: readonly BatchEntryMessage[]
  /** Asks for the files; each arrives whole. The connection closes when they are consumed or abandoned. */
  proceed(): AsyncGenerator<{ path: string; content: Buffer }>
  abandon(): void
}

/**
 * Lists every regular file under `path` and, on `proceed()`, receives them
 * all on the same connection, one whole file at a time (the channel's flow
 * control keeps what is in flight bounded).
 */
export async function requestReadFiles(
  connection: FramedConnection,
  path: string,
): Promise<AgentBatchDownload> {
  // Small files come read during the listing: a system call a file fewer
  // inside the sandbox (file-prefetch.ts, the agent's), and nothing here
  // needs their times.
  await connection.send({ type: 'read-files', path, readWhileListing: true })
  const entries: BatchEntryMessage[] = []
  for (;;) {
    const message = await nextMessage(connection)
    if (message.type === 'end') break
    if (message.type !== 'entries') throw remoteOrUnexpected(message, 'entries')
    entries.push(...message.entries)
  }
  // The host sizes each buffer by what the agent announces; the announcement
  // must stay within what was listed (and checked against the caller's limit),
  // or an agent the sandbox had taken over could make the host allocate anything.
  const listed = new Map(entries.map((entry) => [entry.path, entry.size]))
  async function* files(): AsyncGenerator<{ path: string; content: Buffer }> {
    let finished = false
    try {
      await connection.send({ type: 'proceed' })
      for (;;) {
        const message = await nextMessage(connection)
        if (message.type === 'end') {
          finished = true
          return
        }
        if (message.type !== 'file-begin') throw remoteOrUnexpected(message, 'file-begin')
        const listedSize = listed.get(message.path)
        if (listedSize === undefined || message.size > listedSize)
          throw new ProtocolError(
            `${message.path}: ${message.size} bytes announced, ${listedSize ?? 'none'} listed`,
          )
        const content = Buffer.allocUnsafe(message.size)
        let filled = 0
        while (filled < message.size) {
          const frame = await connection.read()
          if (!frame) throw new ConnectionClosedError('the agent closed the connection mid-file')
          if (frame.kind !== 'data' || frame.channel !== 'file')
            throw new ProtocolError(`expected file data for ${message.path}`)
          if (filled + frame.data.byteLength > message.size)
            throw new ProtocolError(`more bytes than ${message.path} declared`)
          content.set(frame.data, filled)
          filled += frame.data.byteLength
        }
        yield { path: message.path, content }
      }
    } finally {
      if (finished) connection.close()
      else connection.destroy()
    }
  }
  return { entries, proceed: files, abandon: () => connection.destroy() }
}

export async function requestListFiles(
  connection: FramedConnection,
  path: string,
): Promise<FileEntryMessage[]> {
  await connection.send({ type: 'list-files', path })
  const entries: FileEntryMessage[] = []
  for (;;) {
    const reply = await nextMessage(connection)
    if (reply.type === 'end') break
    if (reply.type !== 'entries') throw remoteOrUnexpected(reply, 'entries')
    for (const entry of reply.entries) {
      if (entry.modifiedMs === undefined)
        throw new ProtocolError(`${entry.path}: listed without its modification time`)
      entries.push({ path: entry.path, size: entry.size, modifiedMs: entry.modifiedMs })
    }
  }
  connection.close()
  return entries
}

/** Makes `path` a directory as the sandbox's user (see `MakeDirectoryRequest`); resolves with whether it was made. */
export async function requestMakeDirectory(
  connection: FramedConnection,
  path: string,
  options: { strict?: boolean; mode?: number } = {},
): Promise<boolean> {
  if (options.strict || options.mode !== undefined) requireRevision(connection, 'make-directory')
  await connection.send({
    type: 'make-directory',
    path,
    ...(options.strict ? { strict: true } : {}),
    ...(options.mode === undefined ? {} : { mode: options.mode }),
  })
  const reply = await nextMessage(connection)
  if (reply.type !== 'directory-ok') throw remoteOrUnexpected(reply, 'directory-ok')
  connection.close()
  return reply.created
}

/** What is at `path` (see `StatRequest`). */
export async function requestStat(
  connection: FramedConnection,
  path: string,
  followLinks: boolean,
): Promise<StatOkMessage> {
  requireRevision(connection, 'stat')
  await connection.send({ type: 'stat', path, followLinks })
  const reply = await nextMessage(connection)
  if (reply.type !== 'stat-ok') throw remoteOrUnexpected(reply, 'stat-ok')
  connection.close()
  return reply
}

/** Removes `path` (see `RemoveRequest`). */
export async function requestRemove(
  connection: FramedConnection,
  path: string,
  recursive: boolean,
): Promise<void> {
  requireRevision(connection, 'remove')
  await connection.send({ type: 'remove', path, recursive })
  const reply = await nextMessage(connection)
  if (reply.type !== 'done') throw remoteOrUnexpected(reply, 'done')
  connection.close()
}

/** Renames `from` to `to` (see `RenameRequest`). */
export async function requestRename(
  connection: FramedConnection,
  from: string,
  to: string,
): Promise<void> {
  requireRevision(connection, 'rename')
  await connection.send({ type: 'rename', from, to })
  const reply = await nextMessage(connection)
  if (reply.type !== 'done') throw remoteOrUnexpected(reply, 'done')
  connection.close()
}

/** The processes started with `keep` (see `ListProcessesRequest`). */
export async function requestListProcesses(
  connection: FramedConnection,
): Promise<readonly ProcessEntryMessage[]> {
  requireRevision(connection, 'list-processes')
  await connection.send({ type: 'list-processes' })
  const reply = await nextMessage(connection)
  if (reply.type !== 'processes') throw remoteOrUnexpected(reply, 'processes')
  connection.close()
  return reply.processes
}

/** A watch in place (see `WatchRequest`). */
export interface AgentWatch {
  /** Batches of changes, until `stop()` or the connection ends; a failure of the watch rejects. */
  readonly changes: AsyncIterable<readonly FileChangeMessage[]>
  /** Asks the agent to stop; the iteration then ends. */
  stop(): void
}

/** Starts a watch; resolves once the agent's watches are in place. */
export async function requestWatch(
  connection: FramedConnection,
  path: string,
  recursive: boolean,
): Promise<AgentWatch> {
  requireRevision(connection, 'watch')
  await connection.send({ type: 'watch', path, recursive })
  const ready = await nextMessage(connection)
  if (ready.type !== 'watching') throw remoteOrUnexpected(ready, 'watching')
  let stopping = false
  let iterating = false
  async function* changes(): AsyncGenerator<readonly FileChangeMessage[]> {
    iterating = true
    let finished = false
    try {
      for (;;) {
        const frame = await connection.read()
        if (!frame) {
          if (stopping) {
            finished = true
            return
          }
          throw new ConnectionClosedError('the agent closed the watch')
        }
        if (frame.kind !== 'message') throw new ProtocolError('unexpected data during a watch')
        const message = parseAgentMessage(frame.message)
        if (message.type === 'end') {
          finished = true
          return
        }
        if (message.type !== 'fs-events') throw remoteOrUnexpected(message, 'fs-events')
        yield message.events
      }
    } finally {
      if (finished) connection.close()
      else connection.destroy()
    }
  }
  return {
    changes: changes(),
    stop: () => {
      if (stopping) return
      stopping = true
      // Nobody will read the agent's answer (or its last changes): drop the connection.
      if (!iterating) {
        connection.destroy()
        return
      }
      void connection.send({ type: 'end' }).catch(() => connection.destroy())
    },
  }
}

export interface AgentFileDownload {
  readonly size: number
  readonly mode: number
  /** The file's bytes in order. Stopping early closes the connection. */
  readonly chunks: AsyncIterable<Uint8Array>
  /** Drops the download without reading it (closes the connection). */
  abandon(): void
}

export async function requestReadFile(
  connection: FramedConnection,
  path: string,
): Promise<AgentFileDownload> {
  await connection.send({ type: 'read-file', path })
  const info = await nextMessage(connection)
  if (info.type !== 'file-info') throw remoteOrUnexpected(info, 'file-info')
  async function* chunks(): AsyncGenerator<Uint8Array> {
    let finished = false
    try {
      for (;;) {
        const frame: Frame | undefined = await connection.read()
        if (!frame) throw new ConnectionClosedError('the agent closed the connection mid-file')
        if (frame.kind === 'data') {
          if (frame.channel !== 'file')
            throw new ProtocolError(`unexpected data on ${frame.channel}`)
          // Frames that arrived while the consumer was busy go on as one
          // piece: a consumer pays per piece (a file stream's write is a
          // round trip to Node's thread pool), and a slow one would
          // otherwise stay behind by a piece a frame.
          const queued = connection.takeQueuedData(
            'file',
            DOWNLOAD_PIECE_BYTES - frame.data.byteLength,
          )
          yield queued.length === 0 ? frame.data : Buffer.concat([frame.data, ...queued])
          continue
        }
        const message = parseAgentMessage(frame.message)
        if (message.type === 'end') {
          finished = true
          return
        }
        throw remoteOrUnexpected(message, 'end')
      }
    } finally {
      if (finished) connection.close()
      else connection.destroy()
    }
  }
  return {
    size: info.size,
    mode: info.mode,
    chunks: chunks(),
    abandon: () => connection.destroy(),
  }
}

/**
 * Streams `source` into a file. Resolves with the byte count once the agent
 * has the file in place; the agent replaces the target only after every byte
 * arrived (and, with `size`, only if the count matches).
 */
export async function requestWriteFile(
  connection: FramedConnection,
  path: string,
  source: AsyncIterable<Uint8Array>,
  options: { mode?: number; size?: number; stage?: UploadStage | undefined } = {},
): Promise<number> {
  const staging = stagedSender(connection, options.stage)
  await connection.send({
    type: 'write-file',
    path,
    ...(options.mode === undefined ? {} : { mode: options.mode }),
    ...(options.size === undefined ? {} : { size: options.size }),
  })
  const reply = await uploadReply(connection, staging?.taken)
  staging?.follow(reply)
  let sent = 0
  // A source's pieces (a file stream's are 64 KiB) leave in gathered writes
  // of up to UPLOAD_GATHER_BYTES: the agent then wakes once for many
  // frames, not once a piece, and under gVisor each wake-up and read is a
  // round trip through its kernel. The pieces are held, not copied, as a
  // Node stream's consumer holds what it is given (a source must not fill
  // a piece again once yielded); the upload completes only at its end.
  // With a stage they go as staged pieces instead (staged-sender.ts).
  let held: Uint8Array[] = []
  let heldBytes = 0
  const sendHeld = async (): Promise<void> => {
    const pieces = held
    held = []
    heldBytes = 0
    if (pieces.length > 0) await sendAsData(connection, pieces)
  }
  try {
    for await (const chunk of source) {
      if (reply.arrived()) break
      sent += chunk.byteLength
      if (options.size !== undefined && sent > options.size) {
        throw new AgentRemoteError(
          'size-mismatch',
          `source delivered more than the declared ${options.size} bytes`,
        )
      }
      if (staging) {
        await staging.add(chunk)
        continue
      }
      held.push(chunk)
      heldBytes += chunk.byteLength
      if (heldBytes >= UPLOAD_GATHER_BYTES) await sendHeld()
    }
    await staging?.flush()
    if (!reply.arrived()) await sendHeld()
    if (!reply.arrived()) await connection.send({ type: 'end' })
    const done = await reply.message
    if (done.type !== 'write-done') throw remoteOrUnexpected(done, 'write-done')
    connection.close()
    return done.bytes
  } catch (error) {
    connection.destroy()
    if (staging) throw await stagedFailure(staging, reply, error)
    throw error
  }
}

/** A sender of staged pieces, where there is a stage and the agent takes them (revision 6). */
function stagedSender(
  connection: FramedConnection,
  stage: UploadStage | undefined,
): StagedSender | undefined {
  return stage !== undefined && (agentRevisions.get(connection) ?? 0) >= 6
    ? new StagedSender(connection, stage)
    : undefined
}

/** How long a failed staged upload waits for the agent's refusal, which explains it better. */
const REFUSAL_WAIT_MS = 200

/**
 * The error a staged upload fails with, once its pieces are out of the
 * stage: a piece still being handed over when the agent refused meets a
 * closed connection, and the agent's refusal, sent before it closed, is the
 * better answer.
 */
async function stagedFailure(
  staging: StagedSender,
  reply: UploadReply,
  error: unknown,
): Promise<unknown> {
  await staging.abandon()
  if (error instanceof AgentRemoteError) return error
  const answer = await Promise.race([
    reply.message.catch(() => undefined),
    new Promise<undefined>((resolve) => setTimeout(() => resolve(undefined), REFUSAL_WAIT_MS)),
  ])
  return answer?.type === 'error' ? remoteOrUnexpected(answer, 'write-done') : error
}

export interface AgentExecHandlers {
  /**
   * Each piece of the command's output. A promise returned holds the next
   * read of the connection until it settles, so a slow consumer slows the
   * command (the agent stops reading its pipes) instead of piling up
   * output in memory; it must not reject. Any other return value is ignored.
   */
  readonly onStdout?: (bytes: Uint8Array) => unknown
  readonly onStderr?: (bytes: Uint8Array) => unknown
}

/**
 * One running command. The connection stays open while it runs; closing it
 * from either side ends the command (the agent kills the whole tree).
 */
export class AgentExecSession {
  /** Settles with the agent's exit report; rejects if the connection breaks first. */
  readonly result: Promise<ExitMessage>
  private stdinSent = 0
  private stdinAcked = 0
  private stdinClosed = false
  private pendingWrites: Array<{
    end: number
    resolve: () => void
    reject: (error: unknown) => void
  }> = []
  private cancelWaiters: Array<() => void> = []
  private finished = false

  constructor(
    private readonly connection: FramedConnection,
    readonly pid: number,
    handlers: AgentExecHandlers,
    /** The agent's id of a command started with `keep` (see `ExecRequest.keep`). */
    readonly id?: string,
  ) {
    this.result = this.pump(handlers)
    this.result.catch(() => {})
  }

  /** Resolves once the command has been handed the bytes. */
  async writeStdin(bytes: Uint8Array): Promise<void> {
    if (this.stdinClosed || this.finished) throw new AgentStdinClosedError()
    if (bytes.byteLength === 0) return
    this.stdinSent += bytes.byteLength
    const end = this.stdinSent
    const acknowledged = new Promise<void>((resolve, reject) =>
      this.pendingWrites.push({ end, resolve, reject }),
    )
    // It may be refused (the command closed its input) while the send below is
    // still waiting; it is awaited right after, but must not count as unhandled meanwhile.
    acknowledged.catch(() => {})
    await this.connection.sendData('stdin', bytes)
    await acknowledged
  }

  async endStdin(): Promise<void> {
    if (this.finished || this.stdinClosed) return
    await this.connection.send({ type: 'stdin-end' })
  }

  /** Asks the agent to signal the whole process tree; resolves when it has. */
  async cancel(signal: KillSignalName, reason: 'abort' | 'kill'): Promise<void> {
    if (this.finished) return
    const acknowledged = new Promise<void>((resolve) => this.cancelWaiters.push(resolve))
    await this.connection.send({ type: 'cancel', signal, reason })
    await acknowledged
  }

  /**
   * Drops the connection; the agent kills the command, unless it was
   * started with `keep` (then it goes on, as after {@link detach}).
   */
  abandon(): void {
    this.connection.destroy()
  }

  /**
   * Stops following a command started with `keep`: the connection ends and
   * the command goes on, its output held by the agent for the next `attach`.
   * `result` then rejects.
   */
  detach(): void {
    this.connection.close()
  }

  private async pump(handlers: AgentExecHandlers): Promise<ExitMessage> {
    try {
      for (;;) {
        const frame = await this.connection.read()
        if (!frame)
          throw new ConnectionClosedError(
            'the agent closed the connection before the command ended',
          )
        if (frame.kind === 'data') {
          if (frame.channel !== 'stdout' && frame.channel !== 'stderr')
            throw new ProtocolError(`unexpected data on ${frame.channel}`)
          const deliver = frame.channel === 'stdout' ? handlers.onStdout : handlers.onStderr
          const held = deliver?.(frame.data)
          if (held instanceof Promise) await held
          continue
        }
        const message = parseAgentMessage(frame.message)
        switch (message.type) {
          case 'stdin-ack':
            this.acknowledgeStdin(message.bytes, message.closed)
            break
          case 'cancel-ack':
            this.releaseCancels()
            break
          case 'exit':
            this.finish(new AgentStdinClosedError())
            this.connection.close()
            return message
          case 'error':
            throw new AgentRemoteError(message.code, message.message)
          default:
            throw new ProtocolError(`unexpected "${message.type}" during exec`)
        }
      }
    } catch (error) {
      this.finish(error)
      this.connection.destroy()
      throw error
    }
  }

  private acknowledgeStdin(bytes: number, closed: boolean): void {
    this.stdinAcked = bytes
    if (closed) this.stdinClosed = true
    const still: typeof this.pendingWrites = []
    for (const write of this.pendingWrites) {
      if (write.end <= this.stdinAcked) write.resolve()
      else if (closed) write.reject(new AgentStdinClosedError())
      else still.push(write)
    }
    this.pendingWrites = still
  }

  private releaseCancels(): void {
    const waiters = this.cancelWaiters
    this.cancelWaiters = []
    for (const resolve of waiters) resolve()
  }

  private finish(error: unknown): void {
    this.finished = true
    this.stdinClosed = true
    for (const write of this.pendingWrites) write.reject(error)
    this.pendingWrites = []
    this.releaseCancels()
  }
}

/**
 * Starts a command; resolves once the agent has spawned it. `keep` is sent
 * only to an agent that serves it (revision 1); to an older one the command
 * starts as a plain exec, its session without an `id`.
 */
export async function requestExec(
  connection: FramedConnection,
  request: Omit<ExecRequest, 'type'>,
  handlers: AgentExecHandlers = {},
): Promise<AgentExecSession> {
  const { keep, ...plain } = request
  const kept = keep === true && (agentRevisions.get(connection) ?? 0) >= 1
  await connection.send({ type: 'exec', ...plain, ...(kept ? { keep: true } : {}) })
  const started = await nextMessage(connection)
  if (started.type !== 'started') throw remoteOrUnexpected(started, 'started')
  return new AgentExecSession(connection, started.pid, handlers, started.id)
}

/**
 * Attaches to a command started with `keep`: resolves with its session (the
 * output held while nobody was attached arrives first) and how many bytes
 * of output were dropped meanwhile.
 */
export async function requestAttach(
  connection: FramedConnection,
  id: string,
  stdin: boolean,
  handlers: AgentExecHandlers = {},
): Promise<{ session: AgentExecSession; droppedBytes: number }> {
  requireRevision(connection, 'attach')
  await connection.send({ type: 'attach', id, stdin })
  const attached = await nextMessage(connection)
  if (attached.type !== 'attached') throw remoteOrUnexpected(attached, 'attached')
  return {
    session: new AgentExecSession(connection, attached.pid, handlers, id),
    droppedBytes: attached.droppedBytes,
  }
}
