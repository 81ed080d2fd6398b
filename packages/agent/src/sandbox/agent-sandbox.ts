import { Buffer } from 'node:buffer'
import {
  type CordonBackendSandbox,
  SANDBOX_DEFAULT_MAX_READ_BYTES,
  type SandboxAttachOptions,
  type SandboxBackendEnforcement,
  type SandboxBackendSnapshotOptions,
  type SandboxBackendUsage,
  type SandboxBatchWriteReport,
  type SandboxByteSource,
  SandboxConfigValidationError,
  SandboxControlRefusedError,
  SandboxDestroyedError,
  type SandboxDestroyOptions,
  type SandboxDirectoryWatch,
  type SandboxEndReason,
  type SandboxEnvironment,
  type SandboxEvent,
  type SandboxExecEvent,
  type SandboxExecOptions,
  type SandboxExecResult,
  type SandboxFileChange,
  type SandboxFileContent,
  type SandboxFileEntry,
  type SandboxFileInfo,
  type SandboxFileOptions,
  SandboxFileTooLargeError,
  type SandboxFileWrite,
  type SandboxForward,
  type SandboxForwardOptions,
  type SandboxForwardPort,
  type SandboxId,
  type SandboxMakeDirectoryOptions,
  type SandboxNetworkPolicy,
  SandboxOperationError,
  SandboxPathError,
  SandboxPausedError,
  type SandboxPauseOptions,
  type SandboxProcessInfo,
  type SandboxReadFileOptions,
  type SandboxRemoveOptions,
  type SandboxSnapshot,
  type SandboxStartOptions,
  type SandboxStatOptions,
  type SandboxStatus,
  type SandboxTerminal,
  type SandboxTerminalOptions,
  type SandboxWatchOptions,
  type SandboxWriteFileOptions,
} from '@cordon/core'
import {
  describeError,
  ExecOutputCollector,
  resolveSandboxPath,
  throwIfAborted,
  validateExecRequest,
} from '@cordon/core/backend'
import {
  type AgentExecSession,
  AgentStdinClosedError,
  type BatchUploadFile,
} from '../protocol/index.js'
import type { AgentClient } from './agent-client.js'
import { AgentProcess, type AgentProcessEnding } from './agent-process.js'
import { checkHostFile } from './host-file-source.js'
import { forwardPort, type SandboxPortDialer } from './port-forward.js'

const textEncoder = new TextEncoder()

export interface AgentSandboxInit {
  readonly id: SandboxId
  readonly rootDir: string
  /** The sandbox's environment; each command's `env` is laid over it. */
  readonly env: Readonly<Record<string, string>>
  /**
   * Where a command without `cwd` runs: absolute, or relative to `rootDir`
   * (default: `rootDir`). See {@link AgentSandbox.prepareWorkingDirectory}.
   */
  readonly workingDirectory: string | undefined
  /** Timeout of an exec that names none, in ms (default: none). */
  readonly execTimeoutMs?: number
  /** The client of the sandbox's agent, already known to answer. */
  readonly client: AgentClient
  /** `tier:runtime` of the backend, as events name it. */
  readonly backend: string
  /** The `environment` the sandbox reports (the backend's declared one). */
  readonly environment: SandboxEnvironment
  /** What the backend enforces for this sandbox (`CordonBackendSandbox.enforcement`). */
  readonly enforcement: SandboxBackendEnforcement
  readonly emit: (event: SandboxEvent) => void
  /**
   * Deletes what the sandbox runs in (the guest, the container group).
   * `destroy()` calls it once its commands are abandoned; if it throws, a
   * later `destroy()` calls it again, and the sandbox stays usable
   * meanwhile. One that deleted everything but must still fail the
   * `destroy()` throws {@link ReleasedWithError}: the sandbox is destroyed.
   */
  readonly release: (signal: AbortSignal | undefined) => Promise<void>
  /**
   * Freezes and thaws every process of the sandbox (the Docker engine's
   * freezer); without it the sandbox has no `pause` and `resume`.
   */
  readonly freezer?: SandboxFreezer
  /**
   * Captures the sandbox as a snapshot (the backend's own way); without it
   * the sandbox has no `snapshot`.
   */
  readonly snapshot?: (options: SandboxBackendSnapshotOptions) => Promise<SandboxSnapshot>
  /** Changes egress at run time; without it the sandbox has no `setNetworkPolicy`. */
  readonly setNetworkPolicy?: (policy: SandboxNetworkPolicy, signal?: AbortSignal) => Promise<void>
  /**
   * The directories files may be written under, checked as text before a
   * batch write starts so a batch with one bad path writes nothing (the
   * agent checks every resolved path again).
   */
  readonly writeRoots?: readonly string[]
  /**
   * Opens a stream to a TCP port on the sandbox's loopback over the
   * backend's channel; without it the sandbox has no `forwardPort`.
   */
  readonly connectPort?: SandboxPortDialer
  /**
   * Opens a terminal the backend's channel cannot carry (the agent cannot
   * allocate a pseudo-terminal); without it the sandbox has no `openTerminal`.
   */
  readonly openTerminal?: (options: SandboxTerminalOptions) => Promise<SandboxTerminal>
  /**
   * Asked when the agent cannot be reached: whether the sandbox itself is
   * gone, and why (`evicted` when the platform no longer has it, `lost` when
   * it reports it stopped), or undefined when it is still there.
   */
  readonly explainLoss?: () => Promise<LostReason | undefined>
  /** The backend's own usage figures, which take precedence over the agent's (see `usage`). */
  readonly measureUsage?: (signal?: AbortSignal) => Promise<Partial<SandboxBackendUsage>>
  /**
   * Whether the agent's own measurements count (default true). False where
   * the agent is not alone on its machine (a local process): its figures
   * (its user's processes, its cgroup) would be the host's, so `usage()`
   * reports `measureUsage`'s alone.
   */
  readonly agentMeasuresUsage?: boolean
  /**
   * Whether a watch sees changes made to the sandbox's files from outside
   * it (a host directory the host writes to): true only where the agent
   * shares the host's kernel (Docker under runc). Without it a watch that
   * asks for them (`external`) is refused.
   */
  readonly watchesExternalChanges?: boolean
  /** See `AgentProcessHooks.explainLost`. */
  readonly explainLostCommand?: (startedAt: number) => Promise<SandboxExecResult | undefined>
  /**
   * A detached sandbox's reconnect secret (`CordonBackendSandbox.reconnectSecret`):
   * what the backend's `connect()` needs to reach it again, opaque to the provider.
   */
  readonly reconnectSecret?: string
  /** A detached sandbox's end time as the backend fixed it (`CordonBackendSandbox.endsAt`). */
  readonly endsAt?: number
  /**
   * Closes the backend's channel to a detached sandbox without ending it;
   * with it the sandbox has `disconnect()`.
   */
  readonly disconnect?: () => Promise<void>
}

/**
 * A sandbox reached through the cordon agent inside it, for backends whose
 * runtime has no exec or file API of its own. Commands and files go through
 * the agent client (a fresh authenticated connection per operation);
 * `destroy` abandons running commands and calls the backend's `release`.
 *
 * `setNetworkPolicy` is there only when the backend can change egress at run
 * time (it passes `setNetworkPolicy` in the init).
 */
/** What freezes a sandbox's processes: the platform's own freezer (a cgroup freezer, gVisor's pause). */
export interface SandboxFreezer {
  /** Resolves once every process of the sandbox is frozen. */
  pause(signal?: AbortSignal): Promise<void>
  /** Resolves once they run again. */
  resume(signal?: AbortSignal): Promise<void>
}

/**
 * Thrown by a backend's `release` that deleted everything the sandbox ran
 * in, yet must fail the `destroy()` with `reported` (the Docker backend's
 * output seal cut short by its bound): unlike any other error from
 * `release`, the sandbox is then destroyed, not left usable for a retry.
 */
export class ReleasedWithError extends Error {
  constructor(readonly reported: Error) {
    super(reported.message, { cause: reported })
    this.name = 'ReleasedWithError'
  }
}

/** Why a sandbox can end without its host destroying it. */
export type LostReason = Extract<
  SandboxEndReason,
  'lost' | 'out-of-memory' | 'evicted' | 'lifetime' | 'storage-limit'
>

export class AgentSandbox implements CordonBackendSandbox {
  readonly id: SandboxId
  readonly rootDir: string
  /** Where a command without `cwd` runs (absolute). */
  readonly workingDirectory: string
  readonly environment: SandboxEnvironment
  readonly enforcement: SandboxBackendEnforcement
  private state: 'ready' | 'destroying' | 'destroyed' = 'ready'
  private lost = false
  /** From the start of `pause()` until `resume()` has thawed the sandbox. */
  private paused = false
  private signalEnded: ((reason: SandboxEndReason) => void) | undefined
  private readonly ended = new Promise<SandboxEndReason>((resolve) => {
    this.signalEnded = resolve
  })
  private destroying: Promise<void> | undefined
  private readonly running = new Set<AgentProcess>()
  private readonly watches = new Set<SandboxDirectoryWatch>()

  readonly setNetworkPolicy?: (
    policy: SandboxNetworkPolicy,
    options?: SandboxFileOptions,
  ) => Promise<void>
  readonly forwardPort?: SandboxForwardPort
  private readonly forwards = new Set<SandboxForward>()
  readonly openTerminal?: (options: SandboxTerminalOptions) => Promise<SandboxTerminal>
  readonly pause?: (options?: SandboxPauseOptions) => Promise<void>
  readonly resume?: (options?: SandboxPauseOptions) => Promise<void>
  readonly snapshot?: (options?: SandboxBackendSnapshotOptions) => Promise<SandboxSnapshot>
  readonly reconnectSecret?: string
  readonly endsAt?: number
  readonly disconnect?: () => Promise<void>

  constructor(private readonly init: AgentSandboxInit) {
    this.id = init.id
    this.rootDir = init.rootDir
    this.environment = init.environment
    this.enforcement = init.enforcement
    this.workingDirectory = resolveSandboxPath(init.rootDir, init.workingDirectory ?? init.rootDir)
    const explain = init.explainLoss
    if (explain) init.client.onTransportFailure(() => void this.checkLoss(explain))
    const open = init.openTerminal
    if (open) {
      this.openTerminal = async (options) => {
        this.assertUsable('openTerminal', undefined)
        // A relative cwd means what it means for exec.
        return open(
          options.cwd === undefined
            ? options
            : { ...options, cwd: resolveSandboxPath(this.rootDir, options.cwd) },
        )
      }
    }
    if (init.reconnectSecret !== undefined) this.reconnectSecret = init.reconnectSecret
    if (init.endsAt !== undefined) this.endsAt = init.endsAt
    const letGo = init.disconnect
    if (letGo) {
      this.disconnect = async () => {
        // This host's hold ends; the sandbox, its agent and its processes go on.
        for (const forward of [...this.forwards]) void forward.close().catch(() => {})
        for (const watch of [...this.watches]) void watch.close()
        this.init.client.close()
        await letGo()
      }
    }
    const freezer = init.freezer
    if (freezer) {
      this.pause = (options) => this.freeze(freezer, options?.signal)
      this.resume = (options) => this.thaw(freezer, options?.signal)
    }
    const capture = init.snapshot
    if (capture) {
      this.snapshot = async (options = {}) => {
        this.assertUsable('snapshot', options.signal)
        return capture(options)
      }
    }
    const change = init.setNetworkPolicy
    if (change) {
      this.setNetworkPolicy = async (policy, options = {}) => {
        this.assertUsable('setNetworkPolicy', options.signal)
        await change(policy, options.signal)
      }
    }
    const dial = init.connectPort
    if (dial) {
      const open = async (port: number, options: SandboxForwardOptions = {}) => {
        this.assertUsable('forwardPort', options.signal)
        const forward = await forwardPort(dial, port, options, (closed) =>
          this.forwards.delete(closed),
        )
        this.forwards.add(forward)
        return forward
      }
      // The forward's kind follows the options, as the overloads promise.
      this.forwardPort = open as SandboxForwardPort
    }
  }

  /**
   * Makes the working directory exist before the sandbox is handed out, so
   * that no command fails later for want of it: the agent creates it (as the
   * sandbox's user, inside the write roots) if it is missing. A directory it
   * may not create fails with `SandboxConfigValidationError` naming
   * `workingDirectory`. Backends call it last in `create()`; the rootDir and
   * the write roots are mounts that exist, and cost no round trip.
   */
  async prepareWorkingDirectory(signal?: AbortSignal): Promise<void> {
    const directory = this.workingDirectory
    if (directory === this.rootDir || this.init.writeRoots?.includes(directory)) return
    try {
      await this.init.client.makeDirectory(directory, signal)
    } catch (error) {
      if (!SandboxPathError.isInstance(error)) throw error
      throw new SandboxConfigValidationError(
        'sandbox create config',
        [
          {
            path: 'workingDirectory',
            message: `${directory} cannot be the working directory: ${error.reason}`,
          },
        ],
        { cause: error },
      )
    }
  }

  /**
   * Marks the sandbox as gone without the host destroying it (its container
   * or guest ended underneath): every later call fails with
   * `SandboxDestroyedError`, and `destroy()` still releases what is left.
   */
  markLost(reason: LostReason | Promise<LostReason> = 'lost'): void {
    if (this.state !== 'ready' || this.lost) return
    this.lost = true
    // The reason may take a moment to learn (an engine event); the sandbox is unusable at once.
    void Promise.resolve(reason).then(
      (known) => this.signalEnded?.(known),
      () => this.signalEnded?.('lost'),
    )
  }

  private checkingLoss = false

  /** Asks the backend whether the sandbox is gone (one question at a time); marks it lost if so. */
  private async checkLoss(explain: () => Promise<LostReason | undefined>): Promise<void> {
    if (this.checkingLoss || this.lost || this.state !== 'ready') return
    this.checkingLoss = true
    try {
      const reason = await explain()
      if (reason) this.markLost(reason)
    } catch {
      // The platform could not say either; the next failure asks again.
    } finally {
      this.checkingLoss = false
    }
  }

  /** Resolves when {@link markLost} is called, with its reason. */
  whenEnded(): Promise<SandboxEndReason> {
    return this.ended
  }

  get status(): SandboxStatus {
    if (this.state !== 'ready' || this.lost) return 'destroyed'
    // A frozen sandbox takes no new work: the reference's `busy`.
    if (this.paused) return 'busy'
    return this.running.size > 0 ? 'busy' : 'ready'
  }

  /**
   * The agent holds its deadlines first, then the connections stop judging
   * its silence, then the platform freezes the sandbox: no deadline of the
   * agent's passes and no connection drops for the time it is frozen. A
   * freezer that fails leaves the sandbox running as it was.
   */
  private async freeze(freezer: SandboxFreezer, signal: AbortSignal | undefined): Promise<void> {
    if (this.paused) return
    this.assertUsable('pause', signal)
    this.paused = true
    const { client } = this.init
    try {
      await client.clocks('pause-clocks', signal)
      client.holdIdle(true)
      await freezer.pause(signal)
    } catch (error) {
      client.holdIdle(false)
      await client.clocks('resume-clocks').catch(() => {})
      this.paused = false
      throw error
    }
  }

  /** The reverse of {@link freeze}. A thaw that fails leaves the sandbox paused. */
  private async thaw(freezer: SandboxFreezer, signal: AbortSignal | undefined): Promise<void> {
    if (!this.paused) return
    if (this.lost || this.state !== 'ready') throw new SandboxDestroyedError(this.id)
    throwIfAborted(signal, 'resume')
    await freezer.resume(signal)
    const { client } = this.init
    client.holdIdle(false)
    this.paused = false
    await client.clocks('resume-clocks', signal)
  }

  async exec(
    command: string,
    args: readonly string[] = [],
    options: SandboxExecOptions = {},
  ): Promise<SandboxExecResult> {
    const { stdin, ...rest } = options
    const timeout = rest.timeout ?? this.init.execTimeoutMs
    const process = await this.launch(
      command,
      args,
      timeout === undefined ? rest : { ...rest, timeout },
      stdin !== undefined,
      'exec',
    )
    if (stdin !== undefined) {
      try {
        await process.write(typeof stdin === 'string' ? textEncoder.encode(stdin) : stdin)
        await process.closeStdin()
      } catch (error) {
        // A command that exits without reading all of its input is not an error of exec.
        if (!(error instanceof Error && error.cause instanceof AgentStdinClosedError)) {
          process.abandon()
          throw error
        }
      }
    }
    return process.wait()
  }

  start(
    command: string,
    args: readonly string[] = [],
    options: SandboxStartOptions = {},
  ): Promise<AgentProcess> {
    const { openStdin, ...rest } = options
    return this.launch(command, args, rest, openStdin ?? true, 'start')
  }

  async writeFile(
    path: string,
    content: string | Uint8Array,
    options: SandboxWriteFileOptions = {},
  ): Promise<void> {
    const bytes = typeof content === 'string' ? textEncoder.encode(content) : content
    await this.writeFileStream(path, singleChunk(bytes), { ...options, size: bytes.byteLength })
  }

  async readFile(path: string, options: SandboxReadFileOptions = {}): Promise<Buffer> {
    this.assertUsable('readFile', options.signal)
    const target = this.resolvePath(path)
    const maxBytes = options.maxBytes ?? SANDBOX_DEFAULT_MAX_READ_BYTES
    const download = await this.init.client.readFile(target, options.signal)
    if (download.size > maxBytes) {
      // Nothing is read: closing the stream drops the file at the agent.
      download.abandon()
      throw new SandboxFileTooLargeError(target, download.size, maxBytes)
    }
    const chunks: Uint8Array[] = []
    let total = 0
    for await (const chunk of download.chunks) {
      // The size was the file's when it was opened; a file growing while read is cut off.
      total += chunk.byteLength
      // Leaving the loop closes the stream.
      if (total > maxBytes) throw new SandboxFileTooLargeError(target, total, maxBytes)
      chunks.push(chunk)
    }
    return Buffer.concat(chunks)
  }

  /**
   * Writes every file on one connection. Every sandbox path is checked, and
   * every host file a `hostPath` names, before the first byte is written;
   * host files are read as the batch is sent (`host-file-source.ts`).
   * Resolves with what the agent wrote, which the provider's event reports.
   */
  async writeFiles(
    files: readonly SandboxFileWrite[],
    options: SandboxFileOptions = {},
  ): Promise<SandboxBatchWriteReport> {
    this.assertUsable('writeFiles', options.signal)
    const roots = this.init.writeRoots
    const batch = files.map((file): BatchUploadFile => {
      const target = this.resolvePath(file.path)
      if (roots && !roots.some((root) => target === root || target.startsWith(`${root}/`)))
        throw new SandboxPathError(target, `outside the writable directories (${roots.join(', ')})`)
      if ('hostPath' in file) {
        const source = checkHostFile(file.hostPath)
        return { path: target, content: source, mode: file.mode ?? source.mode }
      }
      return {
        path: target,
        content: typeof file.content === 'string' ? textEncoder.encode(file.content) : file.content,
        ...(file.mode === undefined ? {} : { mode: file.mode }),
      }
    })
    // One connection for the whole batch: no handshake or round trip per file.
    return this.init.client.writeFiles(this.rootDir, batch, options.signal)
  }

  /**
   * Every regular file under `dir`, each read whole (at most `maxBytes`), on
   * one connection: the listing first, so a file over `maxBytes` is refused
   * before anything is read, then the files in turn, the channel's flow
   * control keeping what is in flight bounded whatever the sandbox wrote.
   */
  async readFiles(
    dir?: string,
    options: SandboxReadFileOptions = {},
  ): Promise<AsyncIterable<SandboxFileContent>> {
    this.assertUsable('readFiles', options.signal)
    const maxBytes = options.maxBytes ?? SANDBOX_DEFAULT_MAX_READ_BYTES
    const batch = await this.init.client.readFiles(
      this.resolvePath(dir ?? this.rootDir),
      options.signal,
    )
    const tooLarge = batch.entries.find((entry) => entry.size > maxBytes)
    if (tooLarge) {
      batch.abandon()
      throw new SandboxFileTooLargeError(tooLarge.path, tooLarge.size, maxBytes)
    }
    return {
      [Symbol.asyncIterator]: async function* () {
        for await (const file of batch.proceed()) {
          // Never more than listed (a file that grew since is read up to its listed
          // size, and the protocol refuses more); kept as a second fence.
          if (file.content.byteLength > maxBytes) {
            batch.abandon()
            throw new SandboxFileTooLargeError(file.path, file.content.byteLength, maxBytes)
          }
          yield file
        }
      },
    }
  }

  async writeFileStream(
    path: string,
    source: SandboxByteSource,
    options: SandboxWriteFileOptions = {},
  ): Promise<void> {
    this.assertUsable('writeFile', options.signal)
    const target = this.resolvePath(path)
    await this.init.client.writeFile(target, toAsyncIterable(source), {
      ...(options.mode === undefined ? {} : { mode: options.mode }),
      ...(options.size === undefined ? {} : { size: options.size }),
      ...(options.signal ? { signal: options.signal } : {}),
    })
  }

  async readFileStream(
    path: string,
    options: SandboxFileOptions = {},
  ): Promise<AsyncIterable<Uint8Array>> {
    this.assertUsable('readFile', options.signal)
    const download = await this.init.client.readFile(this.resolvePath(path), options.signal)
    return download.chunks
  }

  /**
   * The agent's measurements (its user's processes, the bytes in the write
   * roots, its cgroup where readable), with the backend's own view on top
   * (`measureUsage` in the init: the Docker engine's cgroup figures).
   */
  async usage(options: SandboxFileOptions = {}): Promise<SandboxBackendUsage> {
    if (this.paused && !this.lost && this.state === 'ready') {
      // The agent is frozen: the backend's own figures alone (the engine's, on Docker).
      throwIfAborted(options.signal, 'stats')
      return { ...(await this.init.measureUsage?.(options.signal)) }
    }
    this.assertUsable('stats', options.signal)
    if (this.init.agentMeasuresUsage === false)
      return { ...(await this.init.measureUsage?.(options.signal)) }
    const [fromAgent, fromBackend] = await Promise.all([
      this.init.client.usage(options.signal),
      this.init.measureUsage?.(options.signal),
    ])
    const { type: _type, ...measured } = fromAgent
    return { ...measured, ...fromBackend }
  }

  async listFiles(dir?: string, options: SandboxFileOptions = {}): Promise<SandboxFileEntry[]> {
    this.assertUsable('listFiles', options.signal)
    const entries = await this.init.client.listFiles(
      this.resolvePath(dir ?? this.rootDir),
      options.signal,
    )
    return entries.map((entry) => ({
      path: entry.path,
      size: entry.size,
      modifiedMs: entry.modifiedMs,
    }))
  }

  async statFile(path: string, options: SandboxStatOptions = {}): Promise<SandboxFileInfo> {
    this.assertUsable('statFile', options.signal)
    const target = this.resolvePath(path)
    const info = await this.init.client.stat(
      target,
      options.followSymlinks ?? false,
      options.signal,
    )
    return {
      path: target,
      type: info.kind,
      size: info.size,
      mode: info.mode,
      modifiedMs: info.modifiedMs,
      isSymlink: info.kind === 'symlink',
      ...(info.target === undefined ? {} : { symlinkTarget: info.target }),
    }
  }

  async removeFile(path: string, options: SandboxRemoveOptions = {}): Promise<void> {
    this.assertUsable('removeFile', options.signal)
    await this.init.client.remove(
      this.resolvePath(path),
      options.recursive ?? false,
      options.signal,
    )
  }

  async renameFile(from: string, to: string, options: SandboxFileOptions = {}): Promise<void> {
    this.assertUsable('renameFile', options.signal)
    await this.init.client.rename(this.resolvePath(from), this.resolvePath(to), options.signal)
  }

  async makeDirectory(path: string, options: SandboxMakeDirectoryOptions = {}): Promise<boolean> {
    this.assertUsable('makeDirectory', options.signal)
    if (
      options.mode !== undefined &&
      !(Number.isInteger(options.mode) && options.mode >= 0 && options.mode <= 0o7777)
    )
      throw new SandboxConfigValidationError('makeDirectory options', [
        { path: 'mode', message: 'mode must be permission bits (an integer from 0 to 0o7777)' },
      ])
    return this.init.client.makeDirectory(this.resolvePath(path), options.signal, {
      strict: true,
      ...(options.mode === undefined ? {} : { mode: options.mode }),
    })
  }

  /**
   * Watches a directory on a connection of its own: resolves once the
   * agent's watches are in place. The changes are iterated once; the watch
   * ends with `close()`, the signal, leaving the loop, or `destroy()`.
   */
  async watchDirectory(
    path: string,
    options: SandboxWatchOptions = {},
  ): Promise<SandboxDirectoryWatch> {
    this.assertUsable('watchDirectory', options.signal)
    if (options.external && !this.init.watchesExternalChanges)
      throw new SandboxControlRefusedError(
        'watchDirectory.external',
        this.init.backend,
        "changes made to the sandbox's files from outside it are not visible to its kernel's inotify here (gVisor and a microVM guest have kernels of their own; ACI mounts are remote)",
      )
    const signal = options.signal
    const agentWatch = await this.init.client.watch(
      this.resolvePath(path),
      options.recursive ?? false,
      signal,
    )
    const watches = this.watches
    let closed = false
    const close = async (): Promise<void> => {
      if (closed) return
      closed = true
      signal?.removeEventListener('abort', onAbort)
      watches.delete(watch)
      agentWatch.stop()
    }
    const onAbort = (): void => void close()
    const iterate = async function* (): AsyncGenerator<SandboxFileChange> {
      try {
        for await (const batch of agentWatch.changes) {
          for (const change of batch)
            yield {
              type: change.kind,
              path: change.path,
              ...(change.from === undefined ? {} : { oldPath: change.from }),
              isDirectory: change.directory,
            }
        }
      } finally {
        await close()
      }
    }
    let iterating = false
    const watch: SandboxDirectoryWatch = {
      [Symbol.asyncIterator]() {
        if (iterating) throw new SandboxOperationError('watchDirectory', 'a watch is iterated once')
        iterating = true
        return iterate()
      },
      close,
      [Symbol.asyncDispose]: close,
    }
    watches.add(watch)
    if (signal?.aborted) void close()
    else signal?.addEventListener('abort', onAbort, { once: true })
    return watch
  }

  async listProcesses(options: SandboxFileOptions = {}): Promise<readonly SandboxProcessInfo[]> {
    this.assertUsable('listProcesses', options.signal)
    const entries = await this.init.client.listProcesses(options.signal)
    return entries.map((entry) => ({
      id: entry.id,
      pid: entry.pid,
      command: entry.command,
      args: entry.args,
      status: entry.running ? 'running' : 'exited',
      startedAt: entry.startedAt,
      attached: entry.attached,
      ...(entry.endedAt === undefined ? {} : { endedAt: entry.endedAt }),
      ...(entry.exitCode === undefined ? {} : { exitCode: entry.exitCode }),
      ...(entry.signal === undefined ? {} : { signal: entry.signal }),
    }))
  }

  /**
   * Attaches to a process started with `start`: a handle like the one
   * `start` returned (which the agent detaches), with the output kept while
   * nobody was attached replayed first.
   */
  async attachProcess(id: string, options: SandboxAttachOptions = {}): Promise<AgentProcess> {
    this.assertUsable('attachProcess', options.signal)
    if (typeof id !== 'string' || !/^[0-9a-z_]{1,64}$/.test(id))
      throw new SandboxOperationError('attachProcess', `"${String(id)}" is not a process id`)
    const collector = new ExecOutputCollector({
      ...(options.maxOutputBytes === undefined ? {} : { maxOutputBytes: options.maxOutputBytes }),
      ...(options.onOutput ? { onOutput: options.onOutput } : {}),
      ...(options.onOutputBytes ? { onOutputBytes: options.onOutputBytes } : {}),
    })
    const { session, droppedBytes } = await this.init.client.attach(
      id,
      true,
      {
        onStdout: (bytes) => collector.push('stdout', bytes),
        onStderr: (bytes) => collector.push('stderr', bytes),
      },
      options.signal,
    )
    return this.track(session, collector, options.signal, () => {}, droppedBytes)
  }

  [Symbol.asyncDispose](): Promise<void> {
    return this.destroy()
  }

  destroy(options: SandboxDestroyOptions = {}): Promise<void> {
    if (this.state === 'destroyed') return Promise.resolve()
    this.destroying ??= this.runDestroy(options.signal)
    return this.destroying
  }

  private async runDestroy(signal: AbortSignal | undefined): Promise<void> {
    throwIfAborted(signal, 'destroy')
    this.state = 'destroying'
    // A forward's own close() reports a socket directory it could not remove; destroy goes on.
    for (const forward of [...this.forwards]) void forward.close().catch(() => {})
    this.init.client.close()
    for (const watch of [...this.watches]) void watch.close()
    for (const process of this.running) process.abandon()
    if (this.paused && this.init.freezer) {
      // Thawed first, so the agent ends as it always does (its outputs sealed);
      // and gVisor cannot kill a paused sandbox (the engine gives up after 10 s).
      await this.init.freezer.resume().catch(() => {})
      this.paused = false
    }
    try {
      await this.init.release(signal)
    } catch (error) {
      if (error instanceof ReleasedWithError) {
        // Nothing is left to try again: the sandbox is gone, and says so.
        this.state = 'destroyed'
        throw error.reported
      }
      // Let a later call try again.
      this.state = 'ready'
      this.destroying = undefined
      throw error
    }
    this.state = 'destroyed'
  }

  private async launch(
    command: string,
    args: readonly string[],
    options: Omit<SandboxExecOptions, 'stdin'>,
    openStdin: boolean,
    operation: 'exec' | 'start',
  ): Promise<AgentProcess> {
    const request = validateExecRequest(command, args, options, this.rootDir)
    this.assertUsable(operation, options.signal)
    const collector = new ExecOutputCollector({
      ...(options.maxOutputBytes === undefined ? {} : { maxOutputBytes: options.maxOutputBytes }),
      ...(options.onOutput ? { onOutput: options.onOutput } : {}),
      ...(options.onOutputBytes ? { onOutputBytes: options.onOutputBytes } : {}),
    })
    const cwd = request.cwd ?? this.workingDirectory
    const started = Date.now()
    this.init.emit({
      type: 'exec',
      phase: 'start',
      sandboxId: this.id,
      backend: this.init.backend,
      timestamp: started,
      command,
    })
    // Every exec start has its end, also a refused one, so none is reported as still running.
    const emitEnd = (
      outcome: Pick<
        SandboxExecEvent,
        'exitCode' | 'timedOut' | 'aborted' | 'durationMs' | 'outcome' | 'error'
      >,
    ): void => {
      const ended = Date.now()
      this.init.emit({
        type: 'exec',
        phase: 'end',
        sandboxId: this.id,
        backend: this.init.backend,
        timestamp: ended,
        command,
        durationMs: ended - started,
        ...outcome,
      })
    }
    let session: AgentExecSession
    try {
      session = await this.init.client.startExec(
        {
          command,
          args: [...args],
          env: { ...this.init.env, ...options.env },
          cwd,
          stdin: openStdin,
          ...(operation === 'start' ? { keep: true } : {}),
          ...(options.timeout === undefined
            ? {}
            : { timeoutMs: Math.max(1, Math.ceil(options.timeout)) }),
        },
        {
          onStdout: (bytes) => collector.push('stdout', bytes),
          onStderr: (bytes) => collector.push('stderr', bytes),
        },
        options.signal,
      )
    } catch (error) {
      emitEnd({ outcome: 'failed', error: describeError(error) })
      throw error
    }
    return this.track(session, collector, options.signal, (ending) => {
      const result = 'result' in ending ? ending.result : undefined
      emitEnd({
        ...(result
          ? {
              exitCode: result.exitCode,
              timedOut: result.timedOut,
              aborted: result.aborted,
              durationMs: result.durationMs,
            }
          : {}),
        // A detach is no failure: the command runs on, followed by whoever attaches.
        ...('detached' in ending ? { outcome: 'detached' as const } : {}),
        ...('error' in ending
          ? { outcome: 'failed' as const, error: describeError(ending.error) }
          : {}),
      })
      // A command the kernel killed for memory: the OOM kill as a lifecycle event of its own.
      if (result?.oomKilled)
        this.init.emit({
          type: 'lifecycle',
          phase: 'oom',
          sandboxId: this.id,
          backend: this.init.backend,
          timestamp: Date.now(),
        })
    })
  }

  /** A handle on a command's session, counted as running until it settles. */
  private track(
    session: AgentExecSession,
    collector: ExecOutputCollector,
    signal: AbortSignal | undefined,
    onSettled: (ending: AgentProcessEnding) => void,
    droppedBytes = 0,
  ): AgentProcess {
    const process: AgentProcess = new AgentProcess(
      session,
      collector,
      {
        sandboxId: this.id,
        client: this.init.client,
        isDestroyed: () => this.lost || this.state === 'destroyed' || this.state === 'destroying',
        // A sandbox that ended underneath first (lost) is still explained: the host's destroy came after.
        endedByHost: () =>
          !this.lost && (this.state === 'destroyed' || this.state === 'destroying'),
        ...(this.init.explainLostCommand ? { explainLost: this.init.explainLostCommand } : {}),
        onSettled: (ending) => {
          this.running.delete(process)
          onSettled(ending)
        },
      },
      signal,
      droppedBytes,
    )
    this.running.add(process)
    return process
  }

  private assertUsable(operation: string, signal: AbortSignal | undefined): void {
    if (this.lost || this.state === 'destroyed' || this.state === 'destroying')
      throw new SandboxDestroyedError(this.id)
    if (this.paused) throw new SandboxPausedError(this.id, operation)
    throwIfAborted(signal, operation)
  }

  /** Relative paths resolve against rootDir; the agent's jail has the final word on where they may lead. */
  private resolvePath(path: string): string {
    if (typeof path !== 'string' || path.length === 0 || path.includes('\0')) {
      throw new SandboxPathError(String(path), 'a path must be a non-empty string without NUL')
    }
    return resolveSandboxPath(this.rootDir, path)
  }
}

async function* singleChunk(bytes: Uint8Array): AsyncGenerator<Uint8Array> {
  if (bytes.byteLength > 0) yield bytes
}

function toAsyncIterable(source: SandboxByteSource): AsyncIterable<Uint8Array> {
  if (Symbol.asyncIterator in source) return source as AsyncIterable<Uint8Array>
  const stream = source as ReadableStream<Uint8Array>
  return {
    async *[Symbol.asyncIterator]() {
      const reader = stream.getReader()
      try {
        for (;;) {
          const { done, value } = await reader.read()
          if (done) return
          yield value
        }
      } finally {
        reader.releaseLock()
      }
    },
  }
}
