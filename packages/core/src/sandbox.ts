import type { SandboxNetworkPolicyUpdate } from './egress-policy.js'
import type { SandboxId } from './sandbox-id.js'

/**
 * Where a sandbox is in its life. `ready` means a command can run now, never
 * merely that an API accepted a request.
 */
export type SandboxStatus = 'creating' | 'ready' | 'destroying' | 'destroyed' | 'failed'

/** One piece of streamed output, decoded as UTF-8 without splitting characters. */
export interface SandboxOutputChunk {
  readonly stream: 'stdout' | 'stderr'
  readonly data: string
}

export interface SandboxExecOptions {
  /** Kill the command's whole process tree after this many milliseconds. */
  readonly timeout?: number
  /** Extra environment for this command; the sandbox's own environment is the base. */
  readonly env?: Readonly<Record<string, string>>
  /** Working directory; defaults to the sandbox's `rootDir`. */
  readonly cwd?: string
  /** Called for each piece of output, in order, while the command runs. */
  readonly onOutput?: (chunk: SandboxOutputChunk) => void
  /** Aborting kills the command's whole process tree; the result has `aborted: true`. */
  readonly signal?: AbortSignal
  /** Bytes written to the command's stdin, which is then closed. Without it stdin is empty. */
  readonly stdin?: string | Uint8Array
  /**
   * Cap on the bytes of each stream kept in the result (default 10 MiB). Output past
   * the cap is still streamed to `onOutput` but dropped from the result, and the
   * matching `…Truncated` flag is set.
   */
  readonly maxOutputBytes?: number
}

export interface SandboxExecResult {
  /** The exit code reported by the sandbox; -1 only when it is truly unknown. */
  readonly exitCode: number
  readonly stdout: string
  readonly stderr: string
  /** Name of the signal that ended the command (`SIGKILL` after a timeout or abort), or null. */
  readonly signal: string | null
  readonly timedOut: boolean
  /** The caller's AbortSignal ended the command. */
  readonly aborted: boolean
  /** The sandbox ran out of memory while the command ran. */
  readonly oomKilled: boolean
  readonly durationMs: number
  readonly stdoutTruncated: boolean
  readonly stderrTruncated: boolean
}

/** Options of a background process: those of exec, but stdin stays open for writing. */
export interface SandboxStartOptions extends Omit<SandboxExecOptions, 'stdin'> {
  /** Keep stdin open so `write` can feed it (default true). */
  readonly openStdin?: boolean
}

/** A command running in the background. `exec` is `start` followed by `wait`. */
export interface SandboxProcess {
  /** Write to the command's stdin. */
  write(data: string | Uint8Array): Promise<void>
  /** Close the command's stdin (end of input). */
  closeStdin(): Promise<void>
  /** Kill the command's whole process tree. Resolves when the kill was delivered. */
  kill(signal?: 'SIGTERM' | 'SIGKILL'): Promise<void>
  /** Resolves with the result when the command has ended. */
  wait(): Promise<SandboxExecResult>
}

/** A regular file found by `listFiles`. */
export interface SandboxFileEntry {
  /** Absolute path inside the sandbox. */
  readonly path: string
  readonly size: number
  /** Last modification time, milliseconds since the epoch. */
  readonly modifiedMs: number
}

export interface SandboxFileOptions {
  readonly signal?: AbortSignal
}

export interface SandboxWriteFileOptions extends SandboxFileOptions {
  /** Permission bits of a new file (default 0o644). */
  readonly mode?: number
  /**
   * Total bytes a streamed write will deliver, when known. Lets a backend whose
   * transfer format needs the size up front stream straight through instead of
   * spooling to a temporary file first. A source that delivers a different
   * number of bytes fails the write.
   */
  readonly size?: number
}

/** One file of a batch write (`Sandbox.writeFiles`). */
export interface SandboxFileWrite {
  /** Path in the sandbox; a relative path resolves against `rootDir`. */
  readonly path: string
  readonly content: string | Uint8Array
  /** Permission bits of a new file (default 0o644). */
  readonly mode?: number
}

/** One file of a batch read (`Sandbox.readFiles`). */
export interface SandboxFileContent {
  /** Absolute path inside the sandbox. */
  readonly path: string
  readonly content: Uint8Array
}

/** Bytes to stream into a sandbox file. */
export type SandboxByteSource = AsyncIterable<Uint8Array> | ReadableStream<Uint8Array>

export interface SandboxDestroyOptions {
  readonly signal?: AbortSignal
}

export interface Sandbox {
  readonly id: SandboxId
  readonly status: SandboxStatus
  /** The writable outputs directory; relative file paths resolve against it. */
  readonly rootDir: string
  /** Run `command` with `args` as an argv (never through a shell) and wait for it. */
  exec(
    command: string,
    args?: readonly string[],
    options?: SandboxExecOptions,
  ): Promise<SandboxExecResult>
  /** Start `command` in the background. */
  start(
    command: string,
    args?: readonly string[],
    options?: SandboxStartOptions,
  ): Promise<SandboxProcess>
  writeFile(
    path: string,
    content: string | Uint8Array,
    options?: SandboxWriteFileOptions,
  ): Promise<void>
  /** Reads a whole file. For large files prefer `readFileStream`. */
  readFile(path: string, options?: SandboxFileOptions): Promise<Uint8Array>
  /** Streams bytes into a file without holding them all in memory. */
  writeFileStream(
    path: string,
    source: SandboxByteSource,
    options?: SandboxWriteFileOptions,
  ): Promise<void>
  /** Streams a file's bytes out without holding them all in memory. */
  readFileStream(path: string, options?: SandboxFileOptions): Promise<AsyncIterable<Uint8Array>>
  /** Every regular file under `dir` (default `rootDir`), recursively; `[]` if `dir` is missing. */
  listFiles(dir?: string, options?: SandboxFileOptions): Promise<SandboxFileEntry[]>
  /**
   * Writes many files as one transfer, creating missing parent directories,
   * with `writeFile`'s path rules; the files are in memory already, so this is
   * for many small files (use `writeFileStream` for a large one). Much faster
   * than one `writeFile` per file where each transfer has a fixed cost (on the
   * container tier: one archive per mount instead of one per file). Absent on
   * backends without a batch path; hosts then call `writeFile` per file.
   */
  writeFiles?(files: readonly SandboxFileWrite[], options?: SandboxFileOptions): Promise<void>
  /**
   * Every regular file under `dir` (default `rootDir`), recursively, with its
   * content, read as one transfer; nothing for a missing `dir`. Files are
   * yielded one at a time and each is held in memory while yielded, so this is
   * for many small files (use `readFileStream` for a large one). Absent on
   * backends without a batch path; hosts then call `listFiles` and `readFile`.
   */
  readFiles?(dir?: string, options?: SandboxFileOptions): Promise<AsyncIterable<SandboxFileContent>>
  /**
   * Replaces the sandbox's host allowlist at run time. Absent on backends that
   * cannot change egress after creation; present but throwing
   * `SandboxControlRefusedError` when the sandbox was created with a policy that
   * has no gateway (`deny-all`).
   */
  setNetworkPolicy?(update: SandboxNetworkPolicyUpdate, options?: SandboxFileOptions): Promise<void>
  /** Removes the sandbox and everything made for it. Idempotent. */
  destroy(options?: SandboxDestroyOptions): Promise<void>
}
