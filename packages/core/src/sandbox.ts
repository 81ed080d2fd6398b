import type { Buffer } from 'node:buffer'
import type { EgressPolicyKind } from './egress-policy.js'
import type { SandboxBackendEnforcement, SandboxEnforcementReport } from './enforcement.js'
import type { SandboxId } from './sandbox-id.js'

/**
 * Where a sandbox is in its life, with exactly the reference's four values
 * (hosts switch on them exhaustively, so cordon adds none). `ready` means a
 * command can run now, never merely that an API accepted a request; `busy`
 * means it takes no new work now: at least one exec or started process is
 * running, or `pause()` froze it (`CordonSandbox.paused` says which);
 * `destroyed` covers a sandbox being torn down and one that was lost (its
 * `endReason`, where the backend reports one, says which).
 */
export type SandboxStatus = 'creating' | 'ready' | 'busy' | 'destroyed'

/**
 * The isolation primitive a sandbox runs under, with the reference's values.
 * A backend declares its own (`enforcement.environment`): cordon's built-in
 * backends run commands in Linux namespaces and report `linux-namespace`;
 * one with no isolation reports `basic`.
 */
export type SandboxEnvironment = 'linux-namespace' | 'macos-seatbelt' | 'basic'

/** One piece of streamed output, decoded as UTF-8 without splitting characters. */
export interface SandboxOutputChunk {
  readonly stream: 'stdout' | 'stderr'
  readonly data: string
}

/** One piece of streamed output as the bytes the command wrote, undecoded. */
export interface SandboxOutputBytes {
  readonly stream: 'stdout' | 'stderr'
  /** The caller's to keep: the backend does not reuse it. */
  readonly bytes: Uint8Array
}

export interface SandboxExecOptions {
  /**
   * Kill the command's whole process tree after this many milliseconds.
   * Default: the sandbox's `timeoutMs`, else the provider's
   * `defaultTimeoutMs`, else `SANDBOX_DEFAULT_TIMEOUT_MS` (30 s).
   */
  readonly timeout?: number
  /** Extra environment for this command; the sandbox's own environment is the base. */
  readonly env?: Readonly<Record<string, string>>
  /**
   * Working directory: absolute, or relative to `rootDir` (the reference's
   * workspace root). One that does not exist is created first, as the
   * sandbox's user, if it lies inside a writable directory; elsewhere the
   * call is refused with `SandboxPathError`. Default: the sandbox's
   * working directory.
   */
  readonly cwd?: string
  /** Aborting kills the command's whole process tree; the result has `aborted: true`. */
  readonly signal?: AbortSignal
  /** Called for each piece of output, in order, while the command runs. */
  readonly onOutput?: (chunk: SandboxOutputChunk) => void
  /**
   * Called for each piece of output as the bytes the command wrote, in
   * order, while the command runs: binary output arrives exactly as
   * written. A promise (any thenable) it returns holds the command's
   * further output, of both streams, until it settles, however it settles:
   * once the pipes between fill, the command blocks writing, as it would
   * into a slow reader, so a consumer that passes each piece on and waits
   * for it to drain keeps host memory bounded. Any other return value is
   * ignored. May be given with `onOutput`.
   */
  readonly onOutputBytes?: (chunk: SandboxOutputBytes) => unknown
  /** Bytes written to the command's stdin, which is then closed. Without it stdin is empty. */
  readonly stdin?: string | Uint8Array
  /**
   * Cap on the bytes of each stream kept in the result (default 10 MiB). Output past
   * the cap is still streamed to `onOutput` but dropped from the result, and the
   * matching `…Truncated` flag is set.
   */
  readonly maxOutputBytes?: number
}

/**
 * How a command ended. cordon's backends always fill the optional fields
 * (`stdoutTruncated`, `stderrTruncated`, `aborted`, `oomKilled`); they are
 * optional in the type so that any object of the reference's shape is one.
 */
export interface SandboxExecResult {
  /** The exit code reported by the sandbox; -1 only when it is truly unknown. */
  readonly exitCode: number
  readonly stdout: string
  readonly stderr: string
  /** Name of the signal that ended the command (`SIGKILL` after a timeout or abort); absent otherwise. */
  readonly signal?: string
  readonly timedOut: boolean
  readonly durationMs: number
  readonly stdoutTruncated?: boolean
  readonly stderrTruncated?: boolean
  /** The caller's AbortSignal ended the command. */
  readonly aborted?: boolean
  /** The sandbox ran out of memory while the command ran. */
  readonly oomKilled?: boolean
}

/** Options of a background process: those of exec, but stdin stays open for writing. */
export interface SandboxStartOptions extends Omit<SandboxExecOptions, 'stdin'> {
  /** Keep stdin open so `write` can feed it (default true). */
  readonly openStdin?: boolean
}

/**
 * A command running in the background. `exec` is `start` followed by `wait`.
 * A started process has no default timeout: it runs until it ends, is killed,
 * or its `timeout` (if given) runs out. Disposing it (`await using`) kills it
 * if it is still running and this handle is attached to it.
 */
export interface SandboxProcess extends AsyncDisposable {
  /**
   * The sandbox's id of the process, for `listProcesses` and
   * `attachProcess` (always set by cordon's backends).
   */
  readonly id?: string
  /** Its process id inside the sandbox (always set by cordon's backends). */
  readonly pid?: number
  /**
   * Bytes of output dropped while nobody was attached, before this handle
   * attached (0 for the handle `start` returns). Set on a handle from
   * `attachProcess`.
   */
  readonly droppedOutputBytes?: number
  /**
   * Stops following the process without ending it: the handle stops
   * receiving output and `wait()` rejects with `SandboxOperationError`,
   * while the process runs on and its output is kept (up to a bound, the
   * oldest dropped first) for the next `attachProcess(id)`. Always present
   * on cordon's backends.
   */
  detach?(): Promise<void>
  /** Write to the command's stdin. */
  write(data: string | Uint8Array): Promise<void>
  /** Close the command's stdin (end of input). */
  closeStdin(): Promise<void>
  /** Kill the command's whole process tree. Resolves when the kill was delivered. */
  kill(signal?: 'SIGTERM' | 'SIGKILL'): Promise<void>
  /** Resolves with the result when the command has ended. */
  wait(): Promise<SandboxExecResult>
}

/**
 * The process handle a {@link CordonSandbox} hands out (from `start` and
 * `attachProcess`): a {@link SandboxProcess} that can always be detached
 * from. `id` is absent only when the sandbox's agent is too old to keep a
 * process without a connection; `detach` then refuses with
 * `SandboxOperationError`, and `listProcesses` and `attachProcess` with
 * `SandboxControlRefusedError`.
 */
export interface CordonProcess extends SandboxProcess {
  readonly droppedOutputBytes: number
  detach(): Promise<void>
}

/**
 * A process started with `start`, as `listProcesses` reports it (the
 * E2B `commands.list()` and Daytona session-command equivalents).
 */
export interface SandboxProcessInfo {
  /** What `attachProcess` takes. */
  readonly id: string
  /** Its process id inside the sandbox. */
  readonly pid: number
  readonly command: string
  readonly args: readonly string[]
  readonly status: 'running' | 'exited'
  /** When it started, milliseconds since the epoch. */
  readonly startedAt: number
  /** When it ended, for an exited process. */
  readonly endedAt?: number
  /** Its exit code (128 + the signal's number when a signal ended it), for an exited process. */
  readonly exitCode?: number
  /** The signal that ended it, if one did. */
  readonly signal?: string
  /** Whether a handle follows its output now. */
  readonly attached: boolean
}

/** Options of `Sandbox.attachProcess`. */
export interface SandboxAttachOptions {
  /** Called with each piece of output: the output kept while detached first, then live output. */
  readonly onOutput?: (chunk: SandboxOutputChunk) => void
  /** The same pieces as bytes, held by a promise it returns, as for exec's `onOutputBytes`. */
  readonly onOutputBytes?: (chunk: SandboxOutputBytes) => unknown
  /** Cap on the bytes of each stream kept in the result (default 10 MiB), as for exec. */
  readonly maxOutputBytes?: number
  /** Aborting ends the wait for the attach; once attached, it kills the process as for `start`. */
  readonly signal?: AbortSignal
}

/** A regular file found by `listFiles`. */
export interface SandboxFileEntry {
  /** Absolute path inside the sandbox. */
  readonly path: string
  readonly size: number
  /** Last modification time, milliseconds since the epoch (always set by cordon's backends). */
  readonly modifiedMs?: number
}

export interface SandboxFileOptions {
  readonly signal?: AbortSignal
}

/** What `statFile` finds at a path. */
export type SandboxFileType = 'file' | 'directory' | 'symlink' | 'other'

/** What `statFile` reports (E2B `files.getInfo`, Daytona `fs.getFileDetails`). */
export interface SandboxFileInfo {
  /** Absolute path inside the sandbox, as asked (relative paths resolved against `rootDir`). */
  readonly path: string
  /** `symlink` for a link that was not followed. */
  readonly type: SandboxFileType
  /** Bytes (for a link not followed: the length of its target's text). */
  readonly size: number
  /** Permission bits, with the set-id and sticky bits (`0o755`). */
  readonly mode: number
  /** Last modification time, milliseconds since the epoch. */
  readonly modifiedMs: number
  /** Whether the path is a symbolic link (only ever true when links are not followed). */
  readonly isSymlink: boolean
  /** The link's own text (what it points to, unresolved), for a link. */
  readonly symlinkTarget?: string
}

export interface SandboxStatOptions extends SandboxFileOptions {
  /**
   * Report what a symbolic link leads to instead of the link (default
   * false). A link that leads outside the sandbox's readable directories
   * is then refused with `SandboxPathError`; one that leads nowhere is
   * `SandboxFileNotFoundError`.
   */
  readonly followSymlinks?: boolean
}

export interface SandboxRemoveOptions extends SandboxFileOptions {
  /** Remove a directory and everything in it (default false: only an empty one). */
  readonly recursive?: boolean
}

export interface SandboxMakeDirectoryOptions extends SandboxFileOptions {
  /** Permission bits of the directories made (default 0o755, less the agent's umask). */
  readonly mode?: number
}

export interface SandboxWatchOptions extends SandboxFileOptions {
  /** Report changes in subdirectories too, including ones made later (default false). */
  readonly recursive?: boolean
  /**
   * Promise that changes made to the directory from outside the sandbox
   * (by the host, in a host directory it shares) are reported too. Changes
   * made inside the sandbox (by its commands and by this API) always are.
   * A backend whose runtime cannot see outside changes refuses it with
   * `SandboxControlRefusedError` naming `watchDirectory.external`: Docker
   * under gVisor (its kernel implements inotify inside the sandbox), and
   * the microVM and ACI backends. Default false: outside changes may or
   * may not be reported.
   */
  readonly external?: boolean
}

/** One change `watchDirectory` reports. */
export interface SandboxFileChange {
  readonly type: 'created' | 'modified' | 'removed' | 'renamed'
  /** Absolute path inside the sandbox, under the watched directory as it was named. */
  readonly path: string
  /** For `renamed`: where it was. */
  readonly oldPath?: string
  readonly isDirectory: boolean
}

/**
 * A watch of a directory (E2B `files.watchDir`): iterate it for the
 * changes; it ends when `close()` is called, its `signal` aborts, or the
 * loop is left.
 */
export interface SandboxDirectoryWatch extends AsyncIterable<SandboxFileChange>, AsyncDisposable {
  /** Stops the watch; an iteration in progress ends after the changes already received. */
  close(): Promise<void>
}

/** Options of a whole-file read (`readFile`, `readFiles`). */
export interface SandboxReadFileOptions extends SandboxFileOptions {
  /**
   * The largest file read into memory, in bytes (default
   * `SANDBOX_DEFAULT_MAX_READ_BYTES`, 256 MiB). A larger file is refused
   * with `SandboxFileTooLargeError` before any of it is read.
   */
  readonly maxBytes?: number
}

export interface SandboxWriteFileOptions extends SandboxFileOptions {
  /** Permission bits of a new file (default 0o644). */
  readonly mode?: number
  /**
   * Total bytes a streamed write will deliver, when known. A source that
   * delivers a different number of bytes fails the write and leaves the
   * target untouched.
   */
  readonly size?: number
}

/** One file of a batch write (`Sandbox.writeFiles`): bytes in hand, or a file of the host's. */
export type SandboxFileWrite = SandboxContentWrite | SandboxHostFileWrite

/** A batch file whose bytes the caller holds. */
export interface SandboxContentWrite {
  /** Path in the sandbox; a relative path resolves against `rootDir`. */
  readonly path: string
  readonly content: string | Uint8Array
  /** Permission bits of a new file (default 0o644). */
  readonly mode?: number
}

/**
 * A batch file copied from a regular file on the host, as `docker cp` copies
 * one: the backend reads it while the batch is sent, so a batch of host files
 * is never held in host memory whole and its reading overlaps the sandbox's
 * writing. Every host path is checked (it must be a regular file, links
 * followed) before anything is written; a host file whose size changes while
 * it is sent fails the batch with `SandboxHostFileError`, that file unwritten.
 */
export interface SandboxHostFileWrite {
  /** Path in the sandbox; a relative path resolves against `rootDir`. */
  readonly path: string
  /** The host file to copy, read with the host process's own rights. */
  readonly hostPath: string
  /** Permission bits of a new file (default: the host file's, `0o777` at most). */
  readonly mode?: number
}

/**
 * What `writeFiles` wrote, where the backend counts it (host files' sizes
 * are known only to the backend that read them).
 */
export interface SandboxBatchWriteReport {
  readonly files: number
  readonly bytes: number
}

/** One file of a batch read (`Sandbox.readFiles`). */
export interface SandboxFileContent {
  /** Absolute path inside the sandbox. */
  readonly path: string
  readonly content: Buffer
}

/**
 * Options of `Sandbox.forwardPort` for a TCP listener. A TCP port on the
 * loopback is open to every user and process on the host; when only the
 * host's own user may connect, ask for a unix socket instead
 * ({@link SandboxUnixSocketForwardOptions}).
 */
export interface SandboxPortForwardOptions {
  /**
   * Host address to listen on (default `127.0.0.1`). A loopback address
   * (`127.0.0.0/8`, `::1`, `localhost`) only, unless `exposeBeyondLoopback`
   * is `true`: anything else is refused with `SandboxConfigValidationError`.
   */
  readonly hostAddress?: string
  /** Host port to listen on (default: any free port). */
  readonly hostPort?: number
  /**
   * Lets `hostAddress` be an address other machines can reach (`0.0.0.0`,
   * `::`, an interface's address, a host name). Whoever reaches that
   * address reaches the sandbox's port, with no credential asked: set it
   * only for a network you trust with the sandbox's server.
   */
  readonly exposeBeyondLoopback?: boolean
  /** Absent or `false` for a TCP listener; `true` is {@link SandboxUnixSocketForwardOptions}. */
  readonly unixSocket?: false
  readonly signal?: AbortSignal
}

/**
 * Options of `Sandbox.forwardPort` for a unix socket only the host's user
 * (and root) can connect to: it is created in a fresh directory of its own,
 * mode 0700 from the start, in this user's `cordon-forwards-<uid>` directory
 * (also 0700) under the host's temporary directory, and is itself mode 0600
 * by the time `forwardPort` resolves. The directory records its host
 * process: one a killed host left is removed by the next unix-socket
 * forward of this user, or by `cordon gc` (both `sweepForwardDirectories`),
 * once that process is gone.
 */
export interface SandboxUnixSocketForwardOptions {
  readonly unixSocket: true
  readonly signal?: AbortSignal
}

/** What every forward has, whatever the host listens on. */
interface SandboxForwardBase extends AsyncDisposable {
  /** The port inside the sandbox. */
  readonly sandboxPort: number
  /** Connections carried now; while there are any the sandbox is not idle. */
  readonly activeConnections: number
  /** Stops listening and ends the connections it carried. */
  close(): Promise<void>
}

/**
 * A host address that reaches a TCP port inside a sandbox, for dev servers
 * and previews. The sandbox still has no network interface: each connection
 * travels over the host's channel to the sandbox's agent, which connects to
 * the port on the sandbox's loopback. Closed by `close()` or with the sandbox.
 */
export interface SandboxPortForward extends SandboxForwardBase {
  /** Where the host listens. */
  readonly host: string
  readonly port: number
  /** `http://host:port`, for the common case of an HTTP server. */
  readonly url: string
}

/**
 * A unix socket on the host that reaches a TCP port inside a sandbox, as
 * {@link SandboxPortForward} does, for the host's own user alone (e.g.
 * `curl --unix-socket <socketPath> http://localhost/`, or undici's
 * `Agent({ connect: { socketPath } })`). `close()` removes the socket and
 * its directory.
 */
export interface SandboxUnixSocketForward extends SandboxForwardBase {
  /** The socket's absolute path. */
  readonly socketPath: string
}

/** Options of either kind of forward. */
export type SandboxForwardOptions = SandboxPortForwardOptions | SandboxUnixSocketForwardOptions

/** A forward of either kind; `'socketPath' in forward` tells them apart. */
export type SandboxForward = SandboxPortForward | SandboxUnixSocketForward

/**
 * `Sandbox.forwardPort`: a TCP listener by default, a unix socket with
 * `{ unixSocket: true }`.
 */
export interface SandboxForwardPort {
  (port: number, options?: SandboxPortForwardOptions): Promise<SandboxPortForward>
  (port: number, options: SandboxUnixSocketForwardOptions): Promise<SandboxUnixSocketForward>
  (port: number, options?: SandboxForwardOptions): Promise<SandboxForward>
}

/**
 * Why a sandbox ended, on `sandbox.endReason` and on its `destroy.end`
 * event. A host may retry the work on a fresh sandbox after `lost` and
 * `evicted` (the platform's doing), after `out-of-memory` only with more
 * memory, after `storage-limit` only with a larger cap or less output,
 * and after `idle` or `lifetime` if it still wants the work done.
 */
export type SandboxEndReason =
  /** The host called `destroy()`. */
  | 'destroyed'
  /** Its lifetime (`lifetimeMs`) ran out. */
  | 'lifetime'
  /** Its idle timeout (`idleTimeoutMs`) passed with nothing running. */
  | 'idle'
  /** It was killed as a whole for using more memory than it may. */
  | 'out-of-memory'
  /** It wrote more into a capped writable mount (a host directory's `sizeMb`) than the cap allows. */
  | 'storage-limit'
  /** Its engine, VM or agent went away underneath it. */
  | 'lost'
  /** The platform removed it (a container group deleted or reclaimed). */
  | 'evicted'
  /** Its provider was closed. */
  | 'provider-closed'

/**
 * A sandbox's resource use, from `sandbox.stats()`. A field is present only
 * where the backend measures it (each backend's README lists which).
 */
export interface SandboxUsage {
  /** CPU time its processes used, user and system, in ms. */
  readonly cpuTimeMs?: number
  /** Memory charged to it now, in bytes (page cache included, as the kernel counts it). */
  readonly memoryBytes?: number
  /** The most memory charged to it at once so far, in bytes. */
  readonly memoryPeakBytes?: number
  /** Processes and threads of the sandbox's user now. */
  readonly processes?: number
  /**
   * Disk its writable directories' regular files take, in bytes: each the
   * larger of its size and the blocks allocated to it (so a file's size
   * rounded up to the filesystem's blocks), deleted files its processes
   * still hold open included.
   */
  readonly diskBytes?: number
  /**
   * Bytes it sent out through the egress gateway, over ended connections:
   * everything through a `CONNECT` tunnel, request bodies of plain HTTP.
   */
  readonly egressBytesOut: number
  /** Bytes it received through the egress gateway, counted the same way. */
  readonly egressBytesIn: number
  /** When this was measured (ms since the epoch). */
  readonly measuredAt: number
}

/** What a backend measures itself; the provider adds the egress counts. */
export type SandboxBackendUsage = Omit<
  SandboxUsage,
  'egressBytesOut' | 'egressBytesIn' | 'measuredAt'
>

/** Options of `Sandbox.openTerminal`. */
export interface SandboxTerminalOptions {
  /** Program to run (default: `/bin/sh`). */
  readonly command?: string
  readonly args?: readonly string[]
  /** Working directory (default: the sandbox's). */
  readonly cwd?: string
  /** Environment on top of the sandbox's (`TERM` defaults to `xterm-256color`). */
  readonly env?: Readonly<Record<string, string>>
  /** Terminal size in character cells. */
  readonly size: { readonly cols: number; readonly rows: number }
}

/**
 * An interactive program on a pseudo-terminal in the sandbox. Bytes written
 * are what a user types; `onData` gets what the terminal shows (one stream:
 * a terminal merges stdout and stderr), escape sequences included.
 */
export interface SandboxTerminal extends AsyncDisposable {
  write(data: string | Uint8Array): Promise<void>
  /** Tells the program its terminal is now this size (it gets SIGWINCH). */
  resize(size: { readonly cols: number; readonly rows: number }): Promise<void>
  /** Calls `listener` with each chunk of output; returns the unsubscribe. */
  onData(listener: (data: Uint8Array) => void): () => void
  /** Resolves with the program's exit code when it ends (-1 if it was killed by a signal). */
  readonly exited: Promise<number>
  /** Kills the program and everything it started on this terminal. */
  kill(signal?: 'SIGTERM' | 'SIGKILL' | 'SIGHUP'): Promise<void>
}

/** Bytes to stream into a sandbox file. */
export type SandboxByteSource = AsyncIterable<Uint8Array> | ReadableStream<Uint8Array>

export interface SandboxDestroyOptions {
  readonly signal?: AbortSignal
}

/** Options of `pause()` and `resume()`. */
export interface SandboxPauseOptions {
  readonly signal?: AbortSignal
}

/** Options of `snapshot()`. */
export interface SandboxSnapshotOptions {
  /**
   * Capture the running processes too, so that a sandbox created from the
   * snapshot continues them (default false: files only). A backend that
   * cannot refuses with `SandboxControlRefusedError` naming `snapshot.memory`.
   */
  readonly memory?: boolean
  readonly signal?: AbortSignal
}

/** What a provider asks of a backend's `snapshot()`: the host's options, and why it is taken. */
export interface SandboxBackendSnapshotOptions extends SandboxSnapshotOptions {
  /**
   * Taken by `fork()` for its own use: the provider removes it once the
   * forks are made. A backend marks it so that, should the host die before
   * that removal, its garbage collection removes it once the owner is gone
   * rather than keeping it for a user's snapshot retention.
   */
  readonly forFork?: boolean
}

/** Options of `fork()`. */
export interface SandboxForkOptions {
  /** How many sandboxes to make (1 to `SANDBOX_FORK_MAX`, 16). */
  readonly count: number
  /**
   * Continue the running processes in every fork. `true` on a backend that
   * cannot is refused naming `fork`, and on a sandbox the backend cannot
   * checkpoint, naming `snapshot.memory`. Omitted: with memory where the
   * backend declares `memorySnapshot` and can checkpoint this sandbox, else
   * the files only.
   */
  readonly memory?: boolean
  readonly signal?: AbortSignal
}

/**
 * A snapshot of a sandbox: what `snapshot()` resolves with and what
 * `provider.snapshots.list()` lists. `create({ snapshot: id })` starts a
 * new sandbox from it; the snapshot stays until it is removed
 * (`provider.snapshots.remove(id)`) or the host's garbage collection finds
 * it past its retention.
 */
export interface SandboxSnapshot {
  /** `snp_…`; what `create({ snapshot })` takes. */
  readonly id: string
  /** When it was taken, in ms since the epoch. */
  readonly createdAt: number
  /** What it stores beyond the image the sandbox ran: the captured files (and processes). */
  readonly sizeBytes: number
  /** Whether it holds the running processes too. */
  readonly memory: boolean
  /** The backend that took it, as `tier:runtime`. */
  readonly backend: string
  /** The sandbox it was taken of. */
  readonly sourceSandboxId: string
  /**
   * The limits and egress policy of the sandbox it was taken of: a sandbox
   * created from it gets them unless its create call names its own. A
   * `resolver` policy's function is not kept: such a snapshot needs the
   * call's `egress`.
   */
  readonly limits: { readonly memoryLimitMb?: number; readonly maxProcesses?: number }
  readonly egress: {
    readonly kind: EgressPolicyKind
    readonly allowedHosts?: readonly string[]
  }
}

/** Options of `provider.snapshots.list()` and `remove()`. */
export interface SandboxSnapshotListOptions {
  readonly signal?: AbortSignal
}

/**
 * The snapshots a backend keeps: a backend that declares `snapshot` has
 * these; the provider hands them out as `provider.snapshots`.
 */
export interface SandboxSnapshotStore {
  /** One snapshot; an unknown id is `SandboxSnapshotNotFoundError`. */
  get(id: string, options?: SandboxSnapshotListOptions): Promise<SandboxSnapshot>
  /** Every snapshot on the backend's engine, oldest first. */
  list(options?: SandboxSnapshotListOptions): Promise<readonly SandboxSnapshot[]>
  /**
   * Removes a snapshot: no new sandbox can start from it. Sandboxes already
   * started from it go on. An unknown id is `SandboxSnapshotNotFoundError`.
   */
  remove(id: string, options?: SandboxSnapshotListOptions): Promise<void>
}

/**
 * The run-time egress change `Sandbox.setNetworkPolicy` accepts: the host
 * allowlist that replaces the sandbox's current one (an empty list denies
 * everything).
 */
export interface SandboxNetworkPolicy {
  readonly allowedHosts: readonly string[]
}

/**
 * The contract every sandbox meets, with the reference's members and
 * meanings. cordon's own additions are optional here, so any object with the
 * reference's members is a `Sandbox`; what a cordon provider hands out is a
 * {@link CordonSandbox}, which has them all.
 */
export interface Sandbox {
  readonly id: SandboxId
  readonly status: SandboxStatus
  /** The writable outputs directory; relative file paths resolve against it. */
  readonly rootDir: string
  readonly environment: SandboxEnvironment
  /** Run `command` with `args` as an argv (never through a shell) and wait for it. */
  exec(
    command: string,
    args?: readonly string[],
    options?: SandboxExecOptions,
  ): Promise<SandboxExecResult>
  /**
   * Replaces the sandbox's host allowlist at run time. Absent on backends that
   * cannot change egress after creation; present but throwing
   * `SandboxControlRefusedError` when the sandbox was created with a policy that
   * has no gateway (`deny-all`).
   */
  setNetworkPolicy?(policy: SandboxNetworkPolicy, options?: SandboxFileOptions): Promise<void>
  /** Writes a whole file, creating missing parent directories. */
  writeFile(
    path: string,
    content: string | Uint8Array,
    options?: SandboxWriteFileOptions,
  ): Promise<void>
  /**
   * Reads a whole file into a `Buffer`, refusing one larger than `maxBytes`
   * (default 256 MiB) with `SandboxFileTooLargeError`. For large files use
   * `readFileStream`.
   */
  readFile(path: string, options?: SandboxReadFileOptions): Promise<Buffer>
  /** Every regular file under `rootPath` (default `rootDir`), recursively; `[]` if it is missing. */
  listFiles(rootPath?: string, options?: SandboxFileOptions): Promise<readonly SandboxFileEntry[]>
  /**
   * What is at `path`: type, size, mode, modification time, and whether it
   * is a link (not followed unless `followSymlinks`). Readable directories
   * only; a missing path is `SandboxFileNotFoundError`. Always present on a
   * {@link CordonSandbox}.
   */
  statFile?(path: string, options?: SandboxStatOptions): Promise<SandboxFileInfo>
  /**
   * Removes a file, a link (never what it points to) or an empty directory;
   * with `recursive`, a directory and everything in it. Only inside the
   * writable directories, and never one of the sandbox's mounts itself: any
   * other path is refused with `SandboxPathError`, as `writeFile` refuses
   * it. A missing path is `SandboxFileNotFoundError`. Always present on a
   * {@link CordonSandbox}.
   */
  removeFile?(path: string, options?: SandboxRemoveOptions): Promise<void>
  /**
   * Renames (moves) a file, link or directory, replacing a file at `to`
   * and making `to`'s missing parent directories. Both paths must lie
   * inside the writable directories (`SandboxPathError` otherwise); a move
   * between two mounts is refused with `SandboxOperationError`. Always
   * present on a {@link CordonSandbox}.
   */
  renameFile?(from: string, to: string, options?: SandboxFileOptions): Promise<void>
  /**
   * Makes a directory and its missing parents, as the sandbox's user, inside
   * the writable directories (`SandboxPathError` otherwise). Resolves with
   * `true` if it made it, `false` if it was a directory already. Always
   * present on a {@link CordonSandbox}.
   */
  makeDirectory?(path: string, options?: SandboxMakeDirectoryOptions): Promise<boolean>
  /**
   * Watches a directory (readable directories only) and streams its
   * changes; resolves once the watch is in place, so a change made after
   * it resolves is reported. Always present on a {@link CordonSandbox}.
   */
  watchDirectory?(path: string, options?: SandboxWatchOptions): Promise<SandboxDirectoryWatch>
  /**
   * The processes started with `start` on this sandbox, running and
   * recently exited. Always present on a {@link CordonSandbox}.
   */
  listProcesses?(options?: SandboxFileOptions): Promise<readonly SandboxProcessInfo[]>
  /**
   * Follows a process started with `start` again (from this sandbox object
   * or another one reaching the same sandbox): the output it wrote while
   * nobody was attached comes first, then its live output; `wait()`,
   * `kill()` and `write()` work as on the handle `start` returned, which is
   * detached from it. An unknown id is `SandboxOperationError`. Always
   * present on a {@link CordonSandbox}.
   */
  attachProcess?(id: string, options?: SandboxAttachOptions): Promise<SandboxProcess>
  /** Removes the sandbox and everything made for it. Idempotent. */
  destroy(options?: SandboxDestroyOptions): Promise<void>
  /** Starts `command` in the background (always present on a {@link CordonSandbox}). */
  start?(
    command: string,
    args?: readonly string[],
    options?: SandboxStartOptions,
  ): Promise<SandboxProcess>
  /** Streams bytes into a file in bounded memory (always present on a {@link CordonSandbox}). */
  writeFileStream?(
    path: string,
    source: SandboxByteSource,
    options?: SandboxWriteFileOptions,
  ): Promise<void>
  /** Streams a file's bytes out in bounded memory (always present on a {@link CordonSandbox}). */
  readFileStream?(path: string, options?: SandboxFileOptions): Promise<AsyncIterable<Uint8Array>>
  /**
   * Writes many files, creating missing parent directories, with
   * `writeFile`'s path rules; for many small files, or a host directory's
   * files ({@link SandboxHostFileWrite}). Every path, and every entry's
   * content and mode as `writeFile` checks them, is checked before
   * anything is written: one invalid entry refuses the whole batch. Resolves with the files and bytes written where
   * the backend counts them (the agent's backends do). Absent on backends
   * without a batch path; hosts then call `writeFile` per file.
   */
  writeFiles?(
    files: readonly SandboxFileWrite[],
    options?: SandboxFileOptions,
    // biome-ignore lint/suspicious/noConfusingVoidType: a backend without a count resolves with nothing, typed as Promise<void>
  ): Promise<SandboxBatchWriteReport | void>
  /**
   * Every regular file under `dir` (default `rootDir`), recursively, with its
   * content; nothing for a missing `dir`. Each file is held in memory while
   * yielded and refused past `maxBytes` (default 256 MiB) with
   * `SandboxFileTooLargeError`; host memory stays bounded however many files
   * there are. Absent on backends without a batch path; hosts then call
   * `listFiles` and `readFile`.
   */
  readFiles?(
    dir?: string,
    options?: SandboxReadFileOptions,
  ): Promise<AsyncIterable<SandboxFileContent>>
  /**
   * Listens on the host and carries each connection to `port` on the
   * sandbox's loopback: on a TCP port of the host's loopback (see
   * {@link SandboxPortForward}), or with `{ unixSocket: true }` on a unix
   * socket only the host's user can open (see
   * {@link SandboxUnixSocketForward}). Absent on backends whose channel
   * cannot carry connections.
   */
  forwardPort?: SandboxForwardPort
}

/**
 * What a cordon backend's `create()` resolves with: a {@link Sandbox} with
 * every member a backend implements. The provider wraps it into the
 * {@link CordonSandbox} hosts get, adding what every backend shares (the
 * default exec timeout, lifetime and idle timers, end reasons, usage's egress
 * counts). The optional hooks tell the provider what only the backend knows.
 */
export interface CordonBackendSandbox extends Sandbox, AsyncDisposable {
  exec(
    command: string,
    args?: readonly string[],
    options?: SandboxExecOptions,
  ): Promise<SandboxExecResult>
  start(
    command: string,
    args?: readonly string[],
    options?: SandboxStartOptions,
  ): Promise<SandboxProcess>
  writeFileStream(
    path: string,
    source: SandboxByteSource,
    options?: SandboxWriteFileOptions,
  ): Promise<void>
  readFileStream(path: string, options?: SandboxFileOptions): Promise<AsyncIterable<Uint8Array>>
  /** Opens a terminal; absent where the backend cannot allocate a pseudo-terminal. */
  openTerminal?(options: SandboxTerminalOptions): Promise<SandboxTerminal>
  /** What the backend measures of the sandbox's resource use. */
  usage?(options?: SandboxFileOptions): Promise<SandboxBackendUsage>
  /** What the backend enforces for this sandbox (the provider adds its clocks). */
  readonly enforcement: SandboxBackendEnforcement
  /**
   * Freezes every process of the sandbox (the engine's freezer) and resolves
   * once they are frozen; absent where the backend cannot. While paused,
   * `status` is `busy` and nothing of the sandbox runs.
   */
  pause?(options?: SandboxPauseOptions): Promise<void>
  /** Continues the processes `pause()` froze; resolves once they run again. */
  resume?(options?: SandboxPauseOptions): Promise<void>
  /**
   * Captures the sandbox (its files; with `memory`, its processes too) as a
   * snapshot a new sandbox can start from; absent where the backend cannot.
   */
  snapshot?(options?: SandboxBackendSnapshotOptions): Promise<SandboxSnapshot>
  /**
   * Resolves when the sandbox ends underneath its host (its container died,
   * its agent or VM was lost, the platform removed it), with why. Never
   * resolves for a sandbox the host destroys.
   */
  whenEnded?(): Promise<SandboxEndReason>
  /**
   * The agent's secret of a sandbox created `detached` (what a host needs to
   * connect to it again); the provider turns it into `sandbox.credential`.
   */
  readonly reconnectSecret?: string
  /**
   * A detached sandbox's end time, ms since the epoch, as the backend fixed
   * it where others read it (the engine's label or tag that `list()` and
   * `connect()` report): the provider hands it out as `sandbox.endsAt`, so
   * that the creator's handle tells the same time as every other host.
   * Absent: the provider counts the lifetime from the create's end.
   */
  readonly endsAt?: number
  /**
   * Drops this host's connections to a detached sandbox and leaves it
   * running; absent where the backend makes none.
   */
  disconnect?(): Promise<void>
}

/**
 * What a cordon provider's `create()` resolves with: a {@link Sandbox} with
 * every member cordon implements. `await using sandbox = await
 * provider.create()` destroys it when the scope ends.
 */
export interface CordonSandbox
  extends Omit<
    CordonBackendSandbox,
    | 'usage'
    | 'whenEnded'
    | 'openTerminal'
    | 'statFile'
    | 'removeFile'
    | 'renameFile'
    | 'makeDirectory'
    | 'watchDirectory'
    | 'listProcesses'
    | 'attachProcess'
    | 'start'
    | 'enforcement'
    | 'pause'
    | 'resume'
    | 'snapshot'
    | 'reconnectSecret'
    | 'endsAt'
    | 'disconnect'
  > {
  /**
   * What is enforced for this sandbox, machine-readably: its isolation and
   * runtime, egress mode, each limit with its value, the user it runs as,
   * its mounts and their modes, its exec timeout, idle timeout and
   * lifetime. A limit the backend does not enforce is absent.
   */
  readonly enforced: SandboxEnforcementReport
  /** Starts `command` in the background; see {@link SandboxProcess} and {@link CordonProcess}. */
  start(
    command: string,
    args?: readonly string[],
    options?: SandboxStartOptions,
  ): Promise<CordonProcess>
  statFile(path: string, options?: SandboxStatOptions): Promise<SandboxFileInfo>
  removeFile(path: string, options?: SandboxRemoveOptions): Promise<void>
  renameFile(from: string, to: string, options?: SandboxFileOptions): Promise<void>
  makeDirectory(path: string, options?: SandboxMakeDirectoryOptions): Promise<boolean>
  watchDirectory(path: string, options?: SandboxWatchOptions): Promise<SandboxDirectoryWatch>
  listProcesses(options?: SandboxFileOptions): Promise<readonly SandboxProcessInfo[]>
  attachProcess(id: string, options?: SandboxAttachOptions): Promise<CordonProcess>
  /** Why the sandbox ended; undefined while it lives. */
  readonly endReason: SandboxEndReason | undefined
  /**
   * Counts as activity for the idle timeout: the idle clock starts again
   * now, and with `durationMs` the sandbox counts as busy for at least that
   * long (a lease for work the provider cannot see, such as a client about
   * to connect to a forwarded port).
   */
  keepAlive(durationMs?: number): void
  /** The sandbox's resource use now (see {@link SandboxUsage}). */
  stats(options?: SandboxFileOptions): Promise<SandboxUsage>
  /**
   * Runs an interactive program on a pseudo-terminal. A backend that cannot
   * allocate one refuses with `SandboxControlRefusedError` (`openTerminal`).
   */
  openTerminal(options: SandboxTerminalOptions): Promise<SandboxTerminal>
  /**
   * Whether `pause()` froze the sandbox and `resume()` has not yet thawed it.
   * (The reference's `status` has no value for it: a paused sandbox reports
   * `busy`, as one that takes no new work.)
   */
  readonly paused: boolean
  /**
   * Freezes every process of the sandbox and stops its idle and lifetime
   * clocks: paused time counts toward neither, nor toward the timeout of a
   * command that was running. Resolves once the processes are frozen;
   * `paused` is then true and `status` `busy`, and a paused sandbox uses no CPU. While
   * paused, calls that need the sandbox's processes (`exec`, `start`, file
   * operations, `openTerminal`, `forwardPort`) are refused with
   * `SandboxPausedError` and send nothing; `stats()` answers from the
   * backend's own measurements; `destroy()` works. Pausing a paused sandbox
   * does nothing. A backend that cannot freeze a sandbox refuses with
   * `SandboxControlRefusedError` naming `pause`.
   */
  pause(options?: SandboxPauseOptions): Promise<void>
  /**
   * Continues the processes `pause()` froze and restarts the idle and
   * lifetime clocks where they stopped. Resuming a sandbox that is not
   * paused does nothing; a backend that cannot pause refuses with
   * `SandboxControlRefusedError` naming `resume`.
   */
  resume(options?: SandboxPauseOptions): Promise<void>
  /**
   * Captures the sandbox as a snapshot that `provider.create({ snapshot:
   * id })` starts new sandboxes from, and resolves once it is stored: its
   * files, and with `memory: true` its running processes. What a backend
   * captures is in its README. A snapshot never holds the provider's
   * brokered credentials or the secret the host reaches the sandbox with.
   * A backend that cannot refuses with `SandboxControlRefusedError` naming
   * `snapshot` (`snapshot.memory` for processes); a paused sandbox refuses
   * with `SandboxPausedError`.
   */
  snapshot(options?: SandboxSnapshotOptions): Promise<SandboxSnapshot>
  /**
   * Makes `count` new sandboxes from the state this one is in now (its
   * files, and its processes where `memory`), each with its own id, user,
   * egress client and clocks, with this sandbox's limits, egress policy,
   * environment, timeouts and lifetime (a sandbox reached with `connect()`
   * too: its credential keeps what its create asked for). They share
   * nothing writable with this one or with each other; this sandbox goes
   * on. Forks end with this host, even those of a detached sandbox. The snapshot taken for them is
   * removed once they run. If one cannot be made, none is handed out: those
   * made are destroyed and the error is thrown. A backend that cannot
   * refuses with `SandboxControlRefusedError` naming `fork`.
   */
  fork(options: SandboxForkOptions): Promise<CordonSandbox[]>
  /**
   * Made with `create({ detached: true })` or reached with
   * `provider.connect(id)`: the sandbox outlives this host process and ends
   * at `endsAt` (or when a host destroys it).
   */
  readonly detached: boolean
  /** When a detached sandbox's lifetime ends it, ms since the epoch; undefined otherwise. */
  readonly endsAt: number | undefined
  /**
   * What a host must hold to connect to this detached sandbox from another
   * process (`provider.connect(id, { credential })`): an opaque string
   * carrying the sandbox's agent secret and its create's settings (its
   * environment among them). Keep it as you would a password;
   * undefined for a sandbox that is not detached.
   */
  readonly credential: string | undefined
  /**
   * Drops this process's connections to a detached sandbox and leaves it
   * running (as `provider.close()` does); this handle is unusable
   * afterwards, and `provider.connect(id)` reaches the sandbox again. A
   * sandbox that is not detached refuses it with `SandboxControlRefusedError`
   * naming `disconnect`: it ends with its host, so `destroy()` it.
   */
  disconnect(): Promise<void>
}
