/**
 * The messages of the agent protocol, and their validation.
 *
 * A connection carries exactly one operation:
 *
 * 1. The agent sends `hello` with a fresh nonce.
 * 2. The client answers `auth` with HMAC-SHA256(secret, nonce) and a fresh
 *    nonce of its own. Anything else, or a wrong proof, gets `error:
 *    unauthorized` and the connection closes.
 * 3. The agent sends `auth-ok` with its proof of the secret over both nonces
 *    (see auth.ts); a client that cannot verify it hangs up. The client
 *    then sends one request (`health`,
 *    `exec`, `read-file`, `write-file`, `list-files`, ...).
 * 4. The operation runs to its end message (`health-ok`, `exit`, `end`,
 *    `write-done`) or an `error`, and the connection closes.
 *
 * The protocol number changes only when a client and an agent of different
 * numbers cannot serve each other at all. Requests added since are counted by
 * the `revision` in `hello` (absent: 0): a client sends a request of a later
 * revision only to an agent that announces it, and refuses it with a typed
 * error otherwise; an older client ignores the field.
 *
 * Either side may send `heartbeat` at any time after authentication; a side
 * that hears nothing for several heartbeat intervals treats the peer as gone.
 * Opening a connection per operation is deliberate: after a snapshot resume,
 * established connections are dead but the listener is not.
 */

import type { AgentHealthReport } from '@cordon/core'
import type { CodeCacheUse } from '../code-cache-use.js'

export const PROTOCOL_VERSION = 2
/**
 * Requests this agent serves beyond protocol 2's first set. 1: `stat`,
 * `remove`, `rename`, `make-directory` with `strict`, `watch`, `exec` with
 * `keep`, `list-processes`, `attach`. 2: `pause-clocks`, `resume-clocks`.
 * 3: `suspend-channel`. 4: `adopt-session`. 5: `hold-host`. 6: `staged` pieces
 * of a `write-file` (staged-pieces.ts), each answered by `staged-taken`.
 */
export const PROTOCOL_REVISION = 6

export type AgentErrorCode =
  | 'unauthorized'
  | 'bad-request'
  | 'path-refused'
  | 'not-found'
  | 'bad-cwd'
  | 'size-mismatch'
  | 'io-error'
  | 'not-empty'
  | 'cross-device'
  | 'unsupported'
  | 'detached'
  | 'internal'

export type KillSignalName = 'SIGKILL' | 'SIGTERM'

export interface FileEntryMessage {
  readonly path: string
  readonly size: number
  readonly modifiedMs: number
}
/**
 * One file of a `read-files` listing. A file the agent read while listing
 * (the request's `readWhileListing`) is listed by what it read: its size is
 * the bytes it holds, and it has no modification time (asking for one is a
 * system call a file, which is what reading while listing spares).
 */
export interface BatchEntryMessage {
  readonly path: string
  readonly size: number
  readonly modifiedMs?: number
}

// ---- client to agent -------------------------------------------------------

export interface AuthMessage {
  readonly type: 'auth'
  /** Lowercase hex HMAC-SHA256(secret, nonce bytes). */
  readonly proof: string
  /** The client's challenge to the agent: lowercase hex, 32 random bytes. */
  readonly nonce: string
  /** How often each side sends a heartbeat on a quiet connection. */
  readonly heartbeatMs?: number
}
export interface HealthRequest {
  readonly type: 'health'
}
/**
 * Signals every process carrying an exec marker (see process-tree.ts) and
 * their descendants: the processes of a program the agent did not start
 * itself, such as a terminal the engine opened with the marker in its
 * environment.
 */
export interface SignalMarkedRequest {
  readonly type: 'signal-marked'
  readonly marker: string
  readonly signal: 'SIGKILL' | 'SIGTERM' | 'SIGHUP'
}
/** What the sandbox uses now: its user's processes, its writable directories' bytes, its cgroup. */
export interface UsageRequest {
  readonly type: 'usage'
}
export interface ExecRequest {
  readonly type: 'exec'
  readonly command: string
  readonly args: readonly string[]
  /** The complete environment of the command (the agent adds only a default PATH). */
  readonly env: Readonly<Record<string, string>>
  readonly cwd?: string
  readonly timeoutMs?: number
  /** Whether the client will send stdin; without it the command's stdin is empty. */
  readonly stdin: boolean
  /**
   * Revision 1: the command outlives this connection. It is listed by
   * `list-processes`; closing the connection detaches from it (its output is
   * kept, up to a bound, for the next `attach`) instead of killing it.
   */
  readonly keep?: boolean
}
export interface StdinEndMessage {
  readonly type: 'stdin-end'
}
export interface CancelMessage {
  readonly type: 'cancel'
  readonly signal: KillSignalName
  /** `abort` marks the result `aborted`; `kill` is a plain kill. */
  readonly reason: 'abort' | 'kill'
}
export interface ReadFileRequest {
  readonly type: 'read-file'
  readonly path: string
}
export interface WriteFileRequest {
  readonly type: 'write-file'
  readonly path: string
  readonly mode?: number
  /** Declared size; a different number of bytes fails the write. */
  readonly size?: number
}
/**
 * The next `bytes` of a `write-file`'s upload are in a file the host wrote to
 * the agent's stage, a directory only the host and the agent can reach
 * (staged-pieces.ts); the agent answers `staged-taken` once it has them.
 */
export interface StagedPieceMessage {
  readonly type: 'staged'
  /** The piece's file name in the stage: {@link STAGED_NAME} and nothing else. */
  readonly name: string
  readonly bytes: number
}
/** What a staged piece's file may be called: no directory part, nothing to resolve. */
export const STAGED_NAME = /^[0-9a-f]{32}\.upload$/
/** Many files on one connection: `file-begin` and its bytes for each, then `end` (see file-write.ts). */
export interface WriteFilesRequest {
  readonly type: 'write-files'
}
/** One file of a batch: its bytes follow in data frames, exactly `size` of them. */
export interface FileBeginMessage {
  readonly type: 'file-begin'
  readonly path: string
  readonly size: number
  readonly mode?: number
}
/** Every regular file under `path`: the listing, then (after `proceed`) each file's bytes (see file-batch-read.ts). */
export interface ReadFilesRequest {
  readonly type: 'read-files'
  readonly path: string
  /**
   * The client takes small files read during the listing, as they were then
   * (see file-prefetch.ts). An agent that does not know the field lists as
   * before; a client that does not send it gets every entry's time.
   */
  readonly readWhileListing?: boolean
}
/** The client accepts the listing of a `read-files` and wants the files. */
export interface ProceedMessage {
  readonly type: 'proceed'
}
export interface ListFilesRequest {
  readonly type: 'list-files'
  readonly path: string
}
/**
 * Makes a directory (and its parents) as the sandbox's user, inside the write
 * roots, unless it already exists: a sandbox's working directory at create.
 */
export interface MakeDirectoryRequest {
  readonly type: 'make-directory'
  readonly path: string
  /**
   * Revision 1, the file API's `makeDirectory`: the path must lie inside the
   * write roots even when it exists already. Without it a directory that
   * exists anywhere is accepted (a command may start in `/tmp`).
   */
  readonly strict?: boolean
  /** Permission bits of the directories made (default 0o755). */
  readonly mode?: number
}
/** Revision 1: what is at `path`, as `lstat` (or, with `followLinks`, `stat`) sees it. */
export interface StatRequest {
  readonly type: 'stat'
  readonly path: string
  readonly followLinks: boolean
}
/** Revision 1: removes a file, a link or an empty directory; with `recursive`, a directory and everything in it. */
export interface RemoveRequest {
  readonly type: 'remove'
  readonly path: string
  readonly recursive: boolean
}
/** Revision 1: renames (moves) `from` to `to`, both inside the write roots. */
export interface RenameRequest {
  readonly type: 'rename'
  readonly from: string
  readonly to: string
}
/**
 * Revision 1: streams changes under a directory as `fs-events` messages
 * until the client sends `end` (answered with `end`) or hangs up.
 */
export interface WatchRequest {
  readonly type: 'watch'
  readonly path: string
  readonly recursive: boolean
}
/** Revision 1: the processes started with `keep`, running and recently ended. */
export interface ListProcessesRequest {
  readonly type: 'list-processes'
}
/**
 * Revision 1: follows a process started with `keep`: the output kept while
 * nobody was attached, then its live output, stdin and `cancel` as on the
 * `exec` connection, and `exit`. A connection already attached to it is
 * detached (sent `error: detached`).
 */
export interface AttachRequest {
  readonly type: 'attach'
  readonly id: string
  readonly stdin: boolean
}
export interface EndMessage {
  readonly type: 'end'
}
export interface HeartbeatMessage {
  readonly type: 'heartbeat'
}
/**
 * The host is about to freeze the sandbox: hold the agent's deadlines (the
 * lifetime, command timeouts) until `resume-clocks`, so frozen time does
 * not count toward them.
 */
export interface PauseClocksRequest {
  readonly type: 'pause-clocks'
}
/** The sandbox runs again: its deadlines go on, later by the time held. */
export interface ResumeClocksRequest {
  readonly type: 'resume-clocks'
}
/**
 * The host is about to checkpoint the sandbox's memory (a memory snapshot):
 * the agent of a stdio channel answers, drops that channel's streams and
 * reads nothing more from it until a resume line (a new secret, see
 * `readResumeLine`) comes on stdin, in this container or in one restored
 * from the checkpoint. Whatever the checkpoint keeps is then a session that
 * is over and a secret that no longer opens anything.
 */
export interface SuspendChannelRequest {
  readonly type: 'suspend-channel'
  /**
   * Refuse (`unsupported`, naming them) while the sandbox holds TCP sockets
   * in use (listening, connected, closing), its own proxy port's listener
   * aside: a runtime that cannot checkpoint them (gVisor here) asks for this
   * before it checkpoints, so the sandbox is refused untouched.
   */
  readonly refuseOpenTcp?: boolean
}

/**
 * On a connection to a detached agent's direct socket whose stdio session
 * has ended (its creator went away): the agent answers `session-adopted`
 * and then serves its session multiplexer on this same connection, as it
 * did on stdin and stdout, the sandbox's egress connections included (each
 * an `egress` stream the agent opens). The connection's end ends that
 * session; the agent goes on serving its direct socket, and its proxy port
 * refuses every connection again. Refused (`unsupported`) by an agent that
 * is not detached, or whose session is live: on stdio, or adopted by
 * another connection (one host holds a sandbox's egress at a time).
 */
export interface AdoptSessionRequest {
  readonly type: 'adopt-session'
}

/**
 * The creator of a sandbox that must end with it (not detached), on an
 * agent no stdio channel ties to its host (a microVM guest's): the agent
 * answers `host-held` and keeps this connection open, heartbeats only, for
 * as long as the host lives. Once no such connection is open (the host's
 * process died, or went silent for four heartbeats), the agent waits
 * `graceMs` of running time for one to come back, and otherwise ends, as
 * an agent whose stdio channel closed does. Refused (`unsupported`) by a
 * detached agent.
 */
export interface HoldHostRequest {
  readonly type: 'hold-host'
  readonly graceMs: number
}

/** The longest `graceMs` a `hold-host` may ask for (an hour): past it the guest's lifetime is the backstop anyway. */
export const MAX_HOST_GRACE_MS = 3_600_000

export type AgentRequest =
  | HealthRequest
  | UsageRequest
  | SignalMarkedRequest
  | ExecRequest
  | ReadFileRequest
  | WriteFileRequest
  | WriteFilesRequest
  | ReadFilesRequest
  | ListFilesRequest
  | MakeDirectoryRequest
  | PauseClocksRequest
  | ResumeClocksRequest
  | SuspendChannelRequest
  | AdoptSessionRequest
  | HoldHostRequest
  | StatRequest
  | RemoveRequest
  | RenameRequest
  | WatchRequest
  | ListProcessesRequest
  | AttachRequest
export type ClientMessage =
  | AuthMessage
  | AgentRequest
  | FileBeginMessage
  | StagedPieceMessage
  | ProceedMessage
  | StdinEndMessage
  | CancelMessage
  | EndMessage
  | HeartbeatMessage

// ---- agent to client -------------------------------------------------------

export interface HelloMessage {
  readonly type: 'hello'
  readonly protocol: number
  /** Lowercase hex, 32 random bytes. */
  readonly nonce: string
  readonly agentVersion: string
  /** Requests served beyond the protocol's first set (see {@link PROTOCOL_REVISION}); absent: 0. */
  readonly revision?: number
}
export interface AuthOkMessage {
  readonly type: 'auth-ok'
  /** The agent's answer to the client's nonce (auth.ts `computeAgentProof`). */
  readonly proof: string
}
/**
 * The answer to `health`: core's `AgentHealthReport`, which hosts see as it
 * is, and how the agent's program was compiled at its start (code-cache-use.ts;
 * absent when it was started without its loader).
 */
export type HealthOkMessage = AgentHealthReport & { readonly codeCache?: CodeCacheUse }
export interface SignalOkMessage {
  readonly type: 'signal-ok'
  /** How many processes were signalled. */
  readonly signalled: number
}
export interface UsageOkMessage {
  readonly type: 'usage-ok'
  /** Processes and threads whose real uid is the sandbox user's (all, without a `RUN_AS`). */
  readonly processes: number
  /** Bytes of regular files under the write roots, counted as the sandbox user. */
  readonly diskBytes: number
  /** From the agent's cgroup, where the guest has one to read (a VM's or a container's under runc). */
  readonly cpuTimeMs?: number
  readonly memoryBytes?: number
  readonly memoryPeakBytes?: number
}
export interface StartedMessage {
  readonly type: 'started'
  readonly pid: number
  /** For a command started with `keep`: its id for `attach` and `list-processes`. */
  readonly id?: string
}
/** The answer to `attach`: the output kept meanwhile follows as data frames. */
export interface AttachedMessage {
  readonly type: 'attached'
  readonly pid: number
  /** Bytes of output dropped while nobody was attached (the oldest go first). */
  readonly droppedBytes: number
}
export type FileKind = 'file' | 'directory' | 'symlink' | 'other'
export interface StatOkMessage {
  readonly type: 'stat-ok'
  readonly kind: FileKind
  readonly size: number
  /** Permission bits (with set-id and sticky bits). */
  readonly mode: number
  readonly modifiedMs: number
  /** The link's own text, for a link that was not followed. */
  readonly target?: string
}
/** A request done that has nothing to report (`remove`, `rename`). */
export interface DoneMessage {
  readonly type: 'done'
}
export type FileChangeKind = 'created' | 'modified' | 'removed' | 'renamed'
export interface FileChangeMessage {
  readonly kind: FileChangeKind
  /** Under the watched directory as the client named it. */
  readonly path: string
  /** For `renamed`: where it was. */
  readonly from?: string
  readonly directory: boolean
}
/** The watch is in place: a change made from now on is reported. */
export interface WatchingMessage {
  readonly type: 'watching'
}
export interface FileChangesMessage {
  readonly type: 'fs-events'
  readonly events: readonly FileChangeMessage[]
}
export interface ProcessEntryMessage {
  readonly id: string
  readonly pid: number
  readonly command: string
  readonly args: readonly string[]
  readonly running: boolean
  /** Milliseconds since the epoch. */
  readonly startedAt: number
  readonly endedAt?: number
  readonly exitCode?: number
  readonly signal?: string
  /** A connection follows its output now. */
  readonly attached: boolean
}
export interface ProcessesMessage {
  readonly type: 'processes'
  readonly processes: readonly ProcessEntryMessage[]
}
export interface StdinAckMessage {
  readonly type: 'stdin-ack'
  /** Total stdin bytes handed to the command so far. */
  readonly bytes: number
  /** The command's stdin is closed (it exited or stopped reading); later bytes are dropped. */
  readonly closed: boolean
}
export interface CancelAckMessage {
  readonly type: 'cancel-ack'
}
/** The answer to `suspend-channel`, the last thing the agent writes on that session. */
export interface ChannelSuspendedMessage {
  readonly type: 'channel-suspended'
}
/** The answer to `adopt-session`: the last frame; the session multiplexer follows. */
export interface SessionAdoptedMessage {
  readonly type: 'session-adopted'
}
/** The answer to `hold-host`: the agent now holds on to this host (heartbeats follow, nothing else). */
export interface HostHeldMessage {
  readonly type: 'host-held'
  readonly graceMs: number
}
/** The answer to `pause-clocks` and `resume-clocks`. */
export interface ClocksOkMessage {
  readonly type: 'clocks-ok'
  /** On `resume-clocks`: how long the deadlines were held, in ms (0 if they were not). */
  readonly heldMs: number
}
export interface ExitMessage {
  readonly type: 'exit'
  /** The exit code, or 128 + the signal number when a signal ended the command. */
  readonly exitCode: number
  readonly signal: string | null
  readonly timedOut: boolean
  readonly aborted: boolean
  readonly oomKilled: boolean
  readonly durationMs: number
}
export interface FileInfoMessage {
  readonly type: 'file-info'
  readonly size: number
  readonly mode: number
}
/** The agent wrote a staged piece into the upload and removed its file from the stage. */
export interface StagedTakenMessage {
  readonly type: 'staged-taken'
}
export interface WriteReadyMessage {
  readonly type: 'write-ready'
}
export interface WriteDoneMessage {
  readonly type: 'write-done'
  readonly bytes: number
  /** For a batch: how many files were placed. */
  readonly files?: number
}
export interface DirectoryOkMessage {
  readonly type: 'directory-ok'
  /** Whether the agent made it (false: it was already there). */
  readonly created: boolean
}
export interface EntriesMessage {
  readonly type: 'entries'
  /** A `list-files` answer's entries all have `modifiedMs`; see {@link BatchEntryMessage}. */
  readonly entries: readonly BatchEntryMessage[]
}
export interface ErrorMessage {
  readonly type: 'error'
  readonly code: AgentErrorCode
  readonly message: string
}

export type AgentMessage =
  | HelloMessage
  | AuthOkMessage
  | HealthOkMessage
  | UsageOkMessage
  | SignalOkMessage
  | StartedMessage
  | AttachedMessage
  | StatOkMessage
  | DoneMessage
  | WatchingMessage
  | FileChangesMessage
  | ProcessesMessage
  | StdinAckMessage
  | CancelAckMessage
  | ClocksOkMessage
  | ChannelSuspendedMessage
  | SessionAdoptedMessage
  | HostHeldMessage
  | ExitMessage
  | FileInfoMessage
  | WriteReadyMessage
  | StagedTakenMessage
  | WriteDoneMessage
  | EntriesMessage
  | DirectoryOkMessage
  | FileBeginMessage
  | EndMessage
  | ErrorMessage
  | HeartbeatMessage

/** A message that is well-formed JSON but not a valid protocol message. */
export class ProtocolError extends Error {
  constructor(message: string) {
    super(message)
    this.name = 'ProtocolError'
  }
}

type Raw = Record<string, unknown>

const AGENT_ERROR_CODES: ReadonlySet<string> = new Set<AgentErrorCode>([
  'unauthorized',
  'bad-request',
  'path-refused',
  'not-found',
  'bad-cwd',
  'size-mismatch',
  'io-error',
  'not-empty',
  'cross-device',
  'unsupported',
  'detached',
  'internal',
])

function fail(raw: Raw, problem: string): never {
  throw new ProtocolError(`invalid "${String(raw.type)}" message: ${problem}`)
}

function str(
  raw: Raw,
  key: string,
  options: { optional?: boolean; nonEmpty?: boolean } = {},
): string | undefined {
  const value = raw[key]
  if (value === undefined && options.optional) return undefined
  if (typeof value !== 'string') fail(raw, `"${key}" must be a string`)
  if (value.includes('\0')) fail(raw, `"${key}" must not contain NUL`)
  if (options.nonEmpty && value.length === 0) fail(raw, `"${key}" must not be empty`)
  return value
}

function int(
  raw: Raw,
  key: string,
  options: { optional?: boolean; min?: number } = {},
): number | undefined {
  const value = raw[key]
  if (value === undefined && options.optional) return undefined
  if (typeof value !== 'number' || !Number.isSafeInteger(value))
    fail(raw, `"${key}" must be an integer`)
  if (options.min !== undefined && value < options.min)
    fail(raw, `"${key}" must be at least ${options.min}`)
  return value
}

function codeCacheUseOf(raw: Raw): CodeCacheUse {
  const use = raw.codeCache
  if (use !== 'used' && use !== 'rejected' && use !== 'none')
    fail(raw, '"codeCache" must be used, rejected or none')
  return use
}

function bool(raw: Raw, key: string): boolean {
  const value = raw[key]
  if (typeof value !== 'boolean') fail(raw, `"${key}" must be a boolean`)
  return value
}

function stringList(raw: Raw, key: string): string[] {
  const value = raw[key]
  if (
    !Array.isArray(value) ||
    value.some((item) => typeof item !== 'string' || item.includes('\0'))
  ) {
    fail(raw, `"${key}" must be an array of strings without NUL`)
  }
  return value as string[]
}

function absolutePath(raw: Raw, key: string): string {
  const value = str(raw, key, { nonEmpty: true })!
  if (!value.startsWith('/')) fail(raw, `"${key}" must be an absolute path`)
  return value
}

function environment(raw: Raw, key: string): Record<string, string> {
  const value = raw[key]
  if (typeof value !== 'object' || value === null || Array.isArray(value))
    fail(raw, `"${key}" must be an object`)
  const env: Record<string, string> = {}
  for (const [name, entry] of Object.entries(value)) {
    if (!/^[A-Za-z_][A-Za-z0-9_]*$/.test(name)) fail(raw, `environment name "${name}" is not valid`)
    if (typeof entry !== 'string' || entry.includes('\0'))
      fail(raw, `environment value of "${name}" must be a string without NUL`)
    env[name] = entry
  }
  return env
}

/** Validates a message the agent received. Throws {@link ProtocolError}. */
export function parseClientMessage(raw: Raw): ClientMessage {
  switch (raw.type) {
    case 'auth': {
      const proof = str(raw, 'proof')!
      if (!/^[0-9a-f]{64}$/.test(proof)) fail(raw, '"proof" must be 64 lowercase hex digits')
      const nonce = str(raw, 'nonce')!
      if (!/^[0-9a-f]{64}$/.test(nonce)) fail(raw, '"nonce" must be 64 lowercase hex digits')
      const heartbeatMs = int(raw, 'heartbeatMs', { optional: true, min: 1 })
      return heartbeatMs === undefined
        ? { type: 'auth', proof, nonce }
        : { type: 'auth', proof, nonce, heartbeatMs }
    }
    case 'health':
    case 'usage':
    case 'pause-clocks':
    case 'resume-clocks':
    case 'list-processes':
    case 'write-files':
    case 'proceed':
    case 'stdin-end':
    case 'end':
    case 'heartbeat':
      return { type: raw.type }
    case 'adopt-session':
      return { type: 'adopt-session' }
    case 'hold-host': {
      const graceMs = int(raw, 'graceMs', { min: 1 })!
      if (graceMs > MAX_HOST_GRACE_MS) fail(raw, `"graceMs" must be at most ${MAX_HOST_GRACE_MS}`)
      return { type: 'hold-host', graceMs }
    }
    case 'suspend-channel':
      return raw.refuseOpenTcp === undefined
        ? { type: 'suspend-channel' }
        : { type: 'suspend-channel', refuseOpenTcp: bool(raw, 'refuseOpenTcp') }
    case 'exec': {
      const cwd = raw.cwd === undefined ? undefined : absolutePath(raw, 'cwd')
      const timeoutMs = int(raw, 'timeoutMs', { optional: true, min: 1 })
      const keep = raw.keep === undefined ? undefined : bool(raw, 'keep')
      return {
        type: 'exec',
        command: str(raw, 'command', { nonEmpty: true })!,
        args: stringList(raw, 'args'),
        env: environment(raw, 'env'),
        stdin: bool(raw, 'stdin'),
        ...(cwd === undefined ? {} : { cwd }),
        ...(timeoutMs === undefined ? {} : { timeoutMs }),
        ...(keep ? { keep } : {}),
      }
    }
    case 'cancel': {
      const signal = raw.signal
      if (signal !== 'SIGKILL' && signal !== 'SIGTERM')
        fail(raw, '"signal" must be SIGKILL or SIGTERM')
      const reason = raw.reason
      if (reason !== 'abort' && reason !== 'kill') fail(raw, '"reason" must be abort or kill')
      return { type: 'cancel', signal, reason }
    }
    case 'signal-marked': {
      const marker = str(raw, 'marker', { nonEmpty: true })!
      if (!/^[0-9a-f]{16,64}$/.test(marker))
        fail(raw, '"marker" must be 16 to 64 lowercase hex digits')
      const signal = raw.signal
      if (signal !== 'SIGKILL' && signal !== 'SIGTERM' && signal !== 'SIGHUP')
        fail(raw, '"signal" must be SIGKILL, SIGTERM or SIGHUP')
      return { type: 'signal-marked', marker, signal }
    }
    case 'file-begin': {
      const mode = int(raw, 'mode', { optional: true, min: 0 })
      if (mode !== undefined && mode > 0o7777)
        fail(raw, '"mode" must be permission bits (at most 0o7777)')
      return {
        type: 'file-begin',
        path: absolutePath(raw, 'path'),
        size: int(raw, 'size', { min: 0 })!,
        ...(mode === undefined ? {} : { mode }),
      }
    }
    case 'staged': {
      const name = str(raw, 'name')!
      if (!STAGED_NAME.test(name)) fail(raw, '"name" must be 32 lowercase hex digits and ".upload"')
      return { type: 'staged', name, bytes: int(raw, 'bytes', { min: 1 })! }
    }
    case 'read-file':
      return { type: 'read-file', path: absolutePath(raw, 'path') }
    case 'list-files':
      return { type: 'list-files', path: absolutePath(raw, 'path') }
    case 'make-directory': {
      const strict = raw.strict === undefined ? undefined : bool(raw, 'strict')
      const mode = int(raw, 'mode', { optional: true, min: 0 })
      if (mode !== undefined && mode > 0o7777)
        fail(raw, '"mode" must be permission bits (at most 0o7777)')
      return {
        type: 'make-directory',
        path: absolutePath(raw, 'path'),
        ...(strict ? { strict } : {}),
        ...(mode === undefined ? {} : { mode }),
      }
    }
    case 'stat':
      return {
        type: 'stat',
        path: absolutePath(raw, 'path'),
        followLinks: bool(raw, 'followLinks'),
      }
    case 'remove':
      return { type: 'remove', path: absolutePath(raw, 'path'), recursive: bool(raw, 'recursive') }
    case 'rename':
      return { type: 'rename', from: absolutePath(raw, 'from'), to: absolutePath(raw, 'to') }
    case 'watch':
      return { type: 'watch', path: absolutePath(raw, 'path'), recursive: bool(raw, 'recursive') }
    case 'attach': {
      const id = str(raw, 'id', { nonEmpty: true })!
      if (!/^[0-9a-z_]{1,64}$/.test(id)) fail(raw, '"id" must be a process id')
      return { type: 'attach', id, stdin: bool(raw, 'stdin') }
    }
    case 'read-files': {
      const readWhileListing =
        raw.readWhileListing === undefined ? false : bool(raw, 'readWhileListing')
      return {
        type: 'read-files',
        path: absolutePath(raw, 'path'),
        ...(readWhileListing ? { readWhileListing } : {}),
      }
    }
    case 'write-file': {
      const mode = int(raw, 'mode', { optional: true, min: 0 })
      if (mode !== undefined && mode > 0o7777)
        fail(raw, '"mode" must be permission bits (at most 0o7777)')
      const size = int(raw, 'size', { optional: true, min: 0 })
      return {
        type: 'write-file',
        path: absolutePath(raw, 'path'),
        ...(mode === undefined ? {} : { mode }),
        ...(size === undefined ? {} : { size }),
      }
    }
    default:
      throw new ProtocolError(`unknown message type "${String(raw.type)}"`)
  }
}

/** Validates a message the client received. Throws {@link ProtocolError}. */
export function parseAgentMessage(raw: Raw): AgentMessage {
  switch (raw.type) {
    case 'hello': {
      const nonce = str(raw, 'nonce')!
      if (!/^[0-9a-f]{64}$/.test(nonce)) fail(raw, '"nonce" must be 64 lowercase hex digits')
      const revision = int(raw, 'revision', { optional: true, min: 0 })
      return {
        type: 'hello',
        protocol: int(raw, 'protocol')!,
        nonce,
        agentVersion: str(raw, 'agentVersion')!,
        ...(revision === undefined ? {} : { revision }),
      }
    }
    case 'auth-ok': {
      const proof = str(raw, 'proof')!
      if (!/^[0-9a-f]{64}$/.test(proof)) fail(raw, '"proof" must be 64 lowercase hex digits')
      return { type: 'auth-ok', proof }
    }
    case 'cancel-ack':
    case 'write-ready':
    case 'staged-taken':
    case 'done':
    case 'watching':
    case 'end':
    case 'heartbeat':
      return { type: raw.type }
    case 'health-ok': {
      const lifetimeMs = int(raw, 'lifetimeMs', { optional: true, min: 1 })
      return {
        type: 'health-ok',
        pid: int(raw, 'pid', { min: 0 })!,
        uptimeMs: int(raw, 'uptimeMs', { min: 0 })!,
        resumes: int(raw, 'resumes', { min: 0 })!,
        agentVersion: str(raw, 'agentVersion')!,
        writeRoots: stringList(raw, 'writeRoots'),
        readRoots: stringList(raw, 'readRoots'),
        ...(raw.commandsUnderOtherUid === undefined
          ? {}
          : { commandsUnderOtherUid: bool(raw, 'commandsUnderOtherUid') }),
        ...(lifetimeMs === undefined ? {} : { lifetimeMs }),
        ...(raw.codeCache === undefined ? {} : { codeCache: codeCacheUseOf(raw) }),
      }
    }
    case 'signal-ok':
      return { type: 'signal-ok', signalled: int(raw, 'signalled', { min: 0 })! }
    case 'clocks-ok':
      return { type: 'clocks-ok', heldMs: int(raw, 'heldMs', { min: 0 })! }
    case 'channel-suspended':
      return { type: 'channel-suspended' }
    case 'session-adopted':
      return { type: 'session-adopted' }
    case 'host-held':
      return { type: 'host-held', graceMs: int(raw, 'graceMs', { min: 1 })! }
    case 'directory-ok':
      return { type: 'directory-ok', created: bool(raw, 'created') }
    case 'usage-ok': {
      const optional = (name: string) => int(raw, name, { optional: true, min: 0 })
      const cpuTimeMs = optional('cpuTimeMs')
      const memoryBytes = optional('memoryBytes')
      const memoryPeakBytes = optional('memoryPeakBytes')
      return {
        type: 'usage-ok',
        processes: int(raw, 'processes', { min: 0 })!,
        diskBytes: int(raw, 'diskBytes', { min: 0 })!,
        ...(cpuTimeMs === undefined ? {} : { cpuTimeMs }),
        ...(memoryBytes === undefined ? {} : { memoryBytes }),
        ...(memoryPeakBytes === undefined ? {} : { memoryPeakBytes }),
      }
    }
    case 'started': {
      const id = str(raw, 'id', { optional: true, nonEmpty: true })
      return {
        type: 'started',
        pid: int(raw, 'pid', { min: 0 })!,
        ...(id === undefined ? {} : { id }),
      }
    }
    case 'attached':
      return {
        type: 'attached',
        pid: int(raw, 'pid', { min: 0 })!,
        droppedBytes: int(raw, 'droppedBytes', { min: 0 })!,
      }
    case 'stat-ok': {
      const kind = raw.kind
      if (kind !== 'file' && kind !== 'directory' && kind !== 'symlink' && kind !== 'other')
        fail(raw, '"kind" must be file, directory, symlink or other')
      const target = str(raw, 'target', { optional: true })
      return {
        type: 'stat-ok',
        kind,
        size: int(raw, 'size', { min: 0 })!,
        mode: int(raw, 'mode', { min: 0 })!,
        modifiedMs: int(raw, 'modifiedMs')!,
        ...(target === undefined ? {} : { target }),
      }
    }
    case 'fs-events': {
      const events = raw.events
      if (!Array.isArray(events)) fail(raw, '"events" must be an array')
      return {
        type: 'fs-events',
        events: events.map((event: unknown) => {
          if (typeof event !== 'object' || event === null) fail(raw, 'each event must be an object')
          const item = event as Raw
          const kind = item.kind
          if (kind !== 'created' && kind !== 'modified' && kind !== 'removed' && kind !== 'renamed')
            fail(raw, '"kind" must be created, modified, removed or renamed')
          const from = str(item, 'from', { optional: true })
          return {
            kind,
            path: str(item, 'path', { nonEmpty: true })!,
            directory: bool(item, 'directory'),
            ...(from === undefined ? {} : { from }),
          }
        }),
      }
    }
    case 'processes': {
      const processes = raw.processes
      if (!Array.isArray(processes)) fail(raw, '"processes" must be an array')
      return {
        type: 'processes',
        processes: processes.map((entry: unknown) => {
          if (typeof entry !== 'object' || entry === null)
            fail(raw, 'each process must be an object')
          const item = entry as Raw
          const endedAt = int(item, 'endedAt', { optional: true, min: 0 })
          const exitCode = int(item, 'exitCode', { optional: true })
          const signal = str(item, 'signal', { optional: true })
          return {
            id: str(item, 'id', { nonEmpty: true })!,
            pid: int(item, 'pid', { min: 0 })!,
            command: str(item, 'command')!,
            args: stringList(item, 'args'),
            running: bool(item, 'running'),
            startedAt: int(item, 'startedAt', { min: 0 })!,
            attached: bool(item, 'attached'),
            ...(endedAt === undefined ? {} : { endedAt }),
            ...(exitCode === undefined ? {} : { exitCode }),
            ...(signal === undefined ? {} : { signal }),
          }
        }),
      }
    }
    case 'stdin-ack':
      return {
        type: 'stdin-ack',
        bytes: int(raw, 'bytes', { min: 0 })!,
        closed: bool(raw, 'closed'),
      }
    case 'exit': {
      const signal = raw.signal
      if (signal !== null && typeof signal !== 'string')
        fail(raw, '"signal" must be a string or null')
      return {
        type: 'exit',
        exitCode: int(raw, 'exitCode')!,
        signal,
        timedOut: bool(raw, 'timedOut'),
        aborted: bool(raw, 'aborted'),
        oomKilled: bool(raw, 'oomKilled'),
        durationMs: int(raw, 'durationMs', { min: 0 })!,
      }
    }
    case 'file-info':
      return {
        type: 'file-info',
        size: int(raw, 'size', { min: 0 })!,
        mode: int(raw, 'mode', { min: 0 })!,
      }
    case 'write-done': {
      const files = int(raw, 'files', { optional: true, min: 0 })
      return {
        type: 'write-done',
        bytes: int(raw, 'bytes', { min: 0 })!,
        ...(files === undefined ? {} : { files }),
      }
    }
    case 'file-begin':
      return {
        type: 'file-begin',
        path: absolutePath(raw, 'path'),
        size: int(raw, 'size', { min: 0 })!,
      }
    case 'entries': {
      const entries = raw.entries
      if (!Array.isArray(entries)) fail(raw, '"entries" must be an array')
      return {
        type: 'entries',
        entries: entries.map((entry: unknown) => {
          if (typeof entry !== 'object' || entry === null) fail(raw, 'each entry must be an object')
          const item = entry as Raw
          const modifiedMs = int(item, 'modifiedMs', { optional: true, min: 0 })
          return {
            path: str(item, 'path')!,
            size: int(item, 'size', { min: 0 })!,
            ...(modifiedMs === undefined ? {} : { modifiedMs }),
          }
        }),
      }
    }
    case 'error': {
      const code = str(raw, 'code')!
      return {
        type: 'error',
        code: (AGENT_ERROR_CODES.has(code) ? code : 'internal') as AgentErrorCode,
        message: str(raw, 'message')!,
      }
    }
    default:
      throw new ProtocolError(`unknown message type "${String(raw.type)}"`)
  }
}
