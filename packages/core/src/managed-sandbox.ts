import type { Buffer } from 'node:buffer'
import { checkCaptureOptions } from './capture-options.js'
import { SANDBOX_FORK_MAX } from './constants.js'
import type { MeasuredUsageField, SandboxEnforcementReport } from './enforcement.js'
import {
  failureAfterAbort,
  SandboxConfigValidationError,
  SandboxControlRefusedError,
  SandboxDestroyedError,
  SandboxError,
  SandboxPausedError,
  SandboxTransportError,
  throwIfAborted,
} from './errors.js'
import { describeError } from './event-error.js'
import type { SandboxEvent, SandboxFileEvent } from './events.js'
import {
  checkListFilesOptions,
  checkReadFileOptions,
  checkWriteFileCall,
  checkWriteFileStreamOptions,
  checkWriteFilesCall,
} from './file-call-arguments.js'
import type {
  CordonBackendSandbox,
  CordonProcess,
  CordonSandbox,
  SandboxAttachOptions,
  SandboxBackendUsage,
  SandboxBatchWriteReport,
  SandboxByteSource,
  SandboxDestroyOptions,
  SandboxDirectoryWatch,
  SandboxEndReason,
  SandboxEnvironment,
  SandboxExecOptions,
  SandboxExecResult,
  SandboxFileContent,
  SandboxFileEntry,
  SandboxFileInfo,
  SandboxFileOptions,
  SandboxFileWrite,
  SandboxForkOptions,
  SandboxForward,
  SandboxForwardOptions,
  SandboxForwardPort,
  SandboxMakeDirectoryOptions,
  SandboxNetworkPolicy,
  SandboxPauseOptions,
  SandboxProcess,
  SandboxProcessInfo,
  SandboxReadFileOptions,
  SandboxRemoveOptions,
  SandboxSnapshot,
  SandboxSnapshotOptions,
  SandboxStartOptions,
  SandboxStatOptions,
  SandboxStatus,
  SandboxTerminal,
  SandboxTerminalOptions,
  SandboxUsage,
  SandboxWatchOptions,
  SandboxWriteFileOptions,
} from './sandbox.js'
import type { SandboxId } from './sandbox-id.js'

export interface ManagedSandboxHooks {
  readonly backend: string
  /** The fields of `stats()` the backend declares it measures; others it reports are dropped. */
  readonly measuredUsage: readonly MeasuredUsageField[]
  /** Destroy the sandbox this long after it was handed out; undefined for never. */
  readonly lifetimeMs: number | undefined
  /** Destroy the sandbox once nothing has run for this long; undefined for never. */
  readonly idleTimeoutMs: number | undefined
  /** The timeout of an `exec` that names none. */
  readonly execTimeoutMs: number
  readonly emit: (event: SandboxEvent) => void
  readonly onDestroyed: (sandbox: ManagedSandbox) => void
  /** What the backend declares of snapshots: files, processes. */
  readonly snapshots: { readonly files: boolean; readonly memory: boolean }
  /**
   * Makes `count` sandboxes from a snapshot of this one (the provider's,
   * which knows how this sandbox was made).
   */
  readonly fork: (
    source: ManagedSandbox,
    options: { readonly count: number; readonly memory: boolean; readonly signal?: AbortSignal },
  ) => Promise<CordonSandbox[]>
  /**
   * A detached sandbox (made `detached`, or reached with `connect`): when its
   * lifetime ends it, and the credential a host needs to connect to it.
   */
  readonly detached?: { readonly endsAt: number; readonly credential: string }
  /** This process let go of a detached sandbox without ending it (`disconnect()`). */
  readonly onDisconnected?: (sandbox: ManagedSandbox) => void
}

type FileOperation = SandboxFileEvent['operation']

/** A backend's process as a {@link CordonProcess}: one that cannot be detached from says so when asked. */
function detachable(process: SandboxProcess, backend: string): CordonProcess {
  if (typeof process.detach === 'function' && typeof process.droppedOutputBytes === 'number')
    return process as CordonProcess
  return Object.assign(process, {
    droppedOutputBytes: process.droppedOutputBytes ?? 0,
    detach:
      process.detach?.bind(process) ??
      (async () => {
        throw new SandboxControlRefusedError(
          'detach',
          backend,
          "this backend's processes live only as long as their handle",
        )
      }),
  })
}

/** The file and process members a backend may lack; the managed sandbox then refuses them. */
type OptionalMember =
  | 'statFile'
  | 'removeFile'
  | 'renameFile'
  | 'makeDirectory'
  | 'watchDirectory'
  | 'listProcesses'
  | 'attachProcess'

/**
 * The sandbox a provider hands out: the backend's sandbox plus what the
 * provider owns for every backend: the default exec timeout, the lifetime
 * and idle timers, the `busy` status, why the sandbox ended, the egress
 * counts of its usage, file and destroy events, and the provider's record of
 * live sandboxes.
 *
 * Activity, for the idle timeout, is anything the host does through this
 * object while it runs (an exec, a started process until it ends, a
 * terminal until it exits, a file operation, a connection through a
 * forwarded port) and `keepAlive()`. The idle reaper never ends a sandbox
 * while any of these is running: a long silent command keeps it alive.
 *
 * A pause stops both clocks: from `pause()` until `resume()` resolves, the
 * lifetime timer and the idle check are off, and `resume()` moves the
 * lifetime's end and the last activity later by the time paused. Calls
 * that need the sandbox's processes are refused meanwhile with
 * `SandboxPausedError`, before anything reaches the backend.
 */
export class ManagedSandbox implements CordonSandbox {
  readonly setNetworkPolicy?: (
    policy: SandboxNetworkPolicy,
    options?: SandboxFileOptions,
  ) => Promise<void>
  readonly writeFiles?: (
    files: readonly SandboxFileWrite[],
    options?: SandboxFileOptions,
    // biome-ignore lint/suspicious/noConfusingVoidType: a backend without a count resolves with nothing, typed as Promise<void>
  ) => Promise<SandboxBatchWriteReport | void>
  readonly readFiles?: (
    dir?: string,
    options?: SandboxReadFileOptions,
  ) => Promise<AsyncIterable<SandboxFileContent>>
  readonly forwardPort?: SandboxForwardPort
  private expiry: ReturnType<typeof setTimeout> | undefined
  /** When the lifetime runs out (performance.now()); undefined for no lifetime. */
  private expiresAt: number | undefined
  /** When `pause()` was called, until `resume()` resolves (performance.now()). */
  private pausedAt: number | undefined
  /** Pause and resume run one after the other. */
  private pauseControl: Promise<void> = Promise.resolve()
  private idleTimer: ReturnType<typeof setTimeout> | undefined
  private destroying: Promise<void> | undefined
  private ended: SandboxEndReason | undefined
  /** Why the sandbox is being torn down, from the moment it starts (status reads `destroyed` from then). */
  private endingFor: SandboxEndReason | undefined
  /** Settles once the backend's notice that the sandbox ended by itself has been taken in. */
  private endNoticed: Promise<void> | undefined
  /** Operations and processes running now. */
  private running = 0
  /** When activity was last seen (performance.now()). */
  private lastActivity = performance.now()
  /** A `keepAlive(durationMs)` lease: busy until then. */
  private busyUntil = 0
  private readonly forwards = new Set<SandboxForward>()
  /**
   * Processes the host detached from: still work for the idle timeout until
   * the backend lists them as ended (asked when the sandbox looks idle).
   */
  private readonly detachedProcesses = new Set<string>()
  private egressOut = 0
  private egressIn = 0
  private disconnecting: Promise<void> | undefined
  /** When the provider handed this sandbox out, ms since the epoch. */
  readonly handedOutAt = Date.now()

  constructor(
    private readonly inner: CordonBackendSandbox,
    private readonly hooks: ManagedSandboxHooks,
  ) {
    if (inner.setNetworkPolicy) {
      const set = inner.setNetworkPolicy.bind(inner)
      this.setNetworkPolicy = (policy, options) => this.track(() => set(policy, options))
    }
    if (inner.writeFiles) {
      // A backend may resolve with what it wrote: only it knows the sizes of
      // the host files it read.
      const write = inner.writeFiles.bind(inner)
      this.writeFiles = async (files, options) => {
        checkWriteFilesCall(files, options)
        const inHand = files.reduce(
          (sum, file) => sum + ('content' in file ? byteLength(file.content) : 0),
          0,
        )
        return this.fileOperation(
          'write-batch',
          files.length > 0 ? commonDirectory(files.map((file) => file.path)) : this.rootDir,
          () => write(files, options),
          {
            measure: (report) => ({
              bytes: report ? report.bytes : inHand,
              files: files.length,
            }),
          },
        )
      }
    }
    if (inner.forwardPort) {
      const forward = inner.forwardPort.bind(inner)
      const forwardPort = async (port: number, options?: SandboxForwardOptions) => {
        this.refuseWhilePaused('forwardPort')
        const opened = await this.track(() => forward(port, options))
        this.forwards.add(opened)
        const close = opened.close.bind(opened)
        return Object.assign(opened, {
          close: async () => {
            this.forwards.delete(opened)
            await close()
          },
        })
      }
      // The backend's forward is returned as it is (its kind follows the options).
      this.forwardPort = forwardPort as SandboxForwardPort
    }
    if (inner.readFiles) {
      const read = inner.readFiles.bind(inner)
      this.readFiles = (dir, options) => this.readBatch(read, dir, options)
    }
    if (hooks.lifetimeMs !== undefined) {
      this.expiresAt = performance.now() + hooks.lifetimeMs
      this.armExpiry()
    }
    if (hooks.idleTimeoutMs !== undefined) this.armIdleCheck(hooks.idleTimeoutMs)
    this.endNoticed = inner.whenEnded?.().then(
      (reason) => {
        if (this.ended || this.destroying || this.disconnecting) return
        // Already over, whatever the cleanup below meets (an engine that is gone with it).
        this.ended = reason
        hooks.emit({ ...this.lifecycle('ended'), endReason: reason })
        void this.end(reason).catch(() => {})
      },
      () => {},
    )
  }

  get id(): SandboxId {
    return this.inner.id
  }

  get status(): SandboxStatus {
    const status = this.inner.status
    // Unusable through this handle; the sandbox itself runs on (see disconnect()).
    if (status === 'destroyed' || this.disconnecting) return 'destroyed'
    if (this.pausedAt !== undefined) return 'busy'
    return status === 'ready' && this.running > 0 ? 'busy' : status
  }

  get paused(): boolean {
    return this.pausedAt !== undefined
  }

  get detached(): boolean {
    return this.hooks.detached !== undefined
  }

  get endsAt(): number | undefined {
    return this.hooks.detached?.endsAt
  }

  get credential(): string | undefined {
    return this.hooks.detached?.credential
  }

  /**
   * Drops this process's hold on a detached sandbox: its clocks stop here
   * (the engine's side keeps its lifetime) and the backend closes its
   * connections. The sandbox runs on.
   */
  disconnect(): Promise<void> {
    if (!this.hooks.detached) {
      return Promise.reject(
        new SandboxControlRefusedError(
          'disconnect',
          this.hooks.backend,
          'this sandbox was not created detached: it ends with its host process; destroy() it instead',
        ),
      )
    }
    if (this.destroying) return this.destroying
    this.disconnecting ??= (async () => {
      this.stopClocks()
      await this.inner.disconnect?.()
      this.hooks.onDisconnected?.(this)
    })()
    return this.disconnecting
  }

  get rootDir(): string {
    return this.inner.rootDir
  }

  get environment(): SandboxEnvironment {
    return this.inner.environment
  }

  get enforced(): SandboxEnforcementReport {
    const { lifetimeMs, idleTimeoutMs, execTimeoutMs } = this.hooks
    return {
      ...this.inner.enforcement,
      execTimeoutMs,
      ...(lifetimeMs !== undefined ? { lifetimeMs } : {}),
      ...(idleTimeoutMs !== undefined ? { idleTimeoutMs } : {}),
    }
  }

  get endReason(): SandboxEndReason | undefined {
    // While it is torn down its status already reads `destroyed`: say why then too.
    return this.ended ?? this.endingFor
  }

  keepAlive(durationMs?: number): void {
    if (durationMs !== undefined && !(Number.isFinite(durationMs) && durationMs >= 0)) {
      throw new SandboxError(
        `keepAlive: durationMs must be a non-negative number, got ${durationMs}`,
      )
    }
    const now = performance.now()
    this.lastActivity = now
    if (durationMs !== undefined) this.busyUntil = Math.max(this.busyUntil, now + durationMs)
  }

  async stats(options?: SandboxFileOptions): Promise<SandboxUsage> {
    const reported: SandboxBackendUsage = await this.track(
      () => this.inner.usage?.(options) ?? Promise.resolve({}),
    )
    const measured: Record<string, number> = {}
    for (const field of this.hooks.measuredUsage) {
      const value = reported[field]
      if (value !== undefined) measured[field] = value
    }
    return {
      ...measured,
      egressBytesOut: this.egressOut,
      egressBytesIn: this.egressIn,
      measuredAt: Date.now(),
    }
  }

  /** Counts one ended egress connection of this sandbox (the provider routes its events here). */
  countEgress(bytesOut: number, bytesIn: number): void {
    this.egressOut += bytesOut
    this.egressIn += bytesIn
  }

  async openTerminal(options: SandboxTerminalOptions): Promise<SandboxTerminal> {
    this.refuseWhilePaused('openTerminal')
    if (!this.inner.openTerminal) {
      throw new SandboxControlRefusedError(
        'openTerminal',
        this.hooks.backend,
        "this backend's channel cannot allocate a pseudo-terminal; use exec or start",
      )
    }
    const terminal = await this.track(() => this.inner.openTerminal!(options))
    this.holdWhile(terminal.exited)
    return terminal
  }

  async exec(
    command: string,
    args?: readonly string[],
    options: SandboxExecOptions = {},
  ): Promise<SandboxExecResult> {
    this.refuseWhilePaused('exec')
    return this.track(() =>
      this.inner.exec(command, args, {
        ...options,
        timeout: options.timeout ?? this.hooks.execTimeoutMs,
      }),
    )
  }

  async start(
    command: string,
    args?: readonly string[],
    options?: SandboxStartOptions,
  ): Promise<CordonProcess> {
    this.refuseWhilePaused('start')
    const process = await this.track(() => this.inner.start(command, args, options))
    this.holdWhile(process.wait())
    return this.handOut(process)
  }

  async writeFile(
    path: string,
    content: string | Uint8Array,
    options?: SandboxWriteFileOptions,
  ): Promise<void> {
    checkWriteFileCall(content, options)
    return this.fileOperation('write', path, () => this.inner.writeFile(path, content, options), {
      bytes: byteLength(content),
    })
  }

  async readFile(path: string, options?: SandboxReadFileOptions): Promise<Buffer> {
    checkReadFileOptions(options)
    return this.fileOperation('read', path, () => this.inner.readFile(path, options), {
      measure: (content) => ({ bytes: content.length }),
    })
  }

  async writeFileStream(
    path: string,
    source: SandboxByteSource,
    options?: SandboxWriteFileOptions,
  ): Promise<void> {
    checkWriteFileStreamOptions(options)
    let bytes = 0
    const counted = async function* (): AsyncIterable<Uint8Array> {
      for await (const chunk of source as AsyncIterable<Uint8Array>) {
        bytes += chunk.length
        yield chunk
      }
    }
    return this.fileOperation(
      'write-stream',
      path,
      () => this.inner.writeFileStream(path, counted(), options),
      { measure: () => ({ bytes }) },
    )
  }

  async readFileStream(
    path: string,
    options?: SandboxFileOptions,
  ): Promise<AsyncIterable<Uint8Array>> {
    this.refuseWhilePaused('readFileStream')
    const started = performance.now()
    const stream = await this.track(() => this.inner.readFileStream(path, options))
    return this.countedIteration(stream, (chunk) => chunk.length, 'read-stream', path, started)
  }

  async listFiles(
    rootPath?: string,
    options?: SandboxFileOptions,
  ): Promise<readonly SandboxFileEntry[]> {
    checkListFilesOptions(options)
    return this.fileOperation(
      'list',
      rootPath ?? this.rootDir,
      () => this.inner.listFiles(rootPath, options),
      { measure: (entries) => ({ files: entries.length }) },
    )
  }

  async statFile(path: string, options?: SandboxStatOptions): Promise<SandboxFileInfo> {
    const stat = this.optional('statFile')
    return this.fileOperation('stat', path, () => stat(path, options), {})
  }

  async removeFile(path: string, options?: SandboxRemoveOptions): Promise<void> {
    const remove = this.optional('removeFile')
    return this.fileOperation('remove', path, () => remove(path, options), {})
  }

  async renameFile(from: string, to: string, options?: SandboxFileOptions): Promise<void> {
    const rename = this.optional('renameFile')
    return this.fileOperation('rename', from, () => rename(from, to, options), {})
  }

  async makeDirectory(path: string, options?: SandboxMakeDirectoryOptions): Promise<boolean> {
    const make = this.optional('makeDirectory')
    return this.fileOperation('make-directory', path, () => make(path, options), {})
  }

  /** Setting the watch up is activity; a watch waiting for changes is not (it does not hold off the idle timeout). */
  async watchDirectory(
    path: string,
    options?: SandboxWatchOptions,
  ): Promise<SandboxDirectoryWatch> {
    const watch = this.optional('watchDirectory')
    return this.fileOperation('watch', path, () => watch(path, options), {})
  }

  async listProcesses(options?: SandboxFileOptions): Promise<readonly SandboxProcessInfo[]> {
    this.refuseWhilePaused('listProcesses')
    const list = this.optional('listProcesses')
    return this.track(() => list(options))
  }

  async attachProcess(id: string, options?: SandboxAttachOptions): Promise<CordonProcess> {
    this.refuseWhilePaused('attachProcess')
    const attach = this.optional('attachProcess')
    const process = await this.track(() => attach(id, options))
    this.detachedProcesses.delete(id)
    this.holdWhile(process.wait())
    return this.handOut(process)
  }

  /** A process handle for the host: detaching from it leaves the process counted as work. */
  private handOut(process: SandboxProcess): CordonProcess {
    const handed = detachable(process, this.hooks.backend)
    const detach = handed.detach.bind(handed)
    return Object.assign(handed, {
      detach: async () => {
        await detach()
        if (handed.id !== undefined) this.detachedProcesses.add(handed.id)
      },
    })
  }

  /** The backend's member, or a refusal naming it when the backend has none. */
  private optional<K extends OptionalMember>(name: K): NonNullable<CordonBackendSandbox[K]> {
    const member = this.inner[name]
    if (typeof member !== 'function')
      throw new SandboxControlRefusedError(
        name,
        this.hooks.backend,
        `this backend's sandbox has no ${name}`,
      )
    return (member as (...args: never[]) => unknown).bind(this.inner) as NonNullable<
      CordonBackendSandbox[K]
    >
  }

  destroy(options?: SandboxDestroyOptions): Promise<void> {
    return this.end('destroyed', options)
  }

  async pause(options: SandboxPauseOptions = {}): Promise<void> {
    throwIfAborted(options.signal, 'pause')
    const pause = this.inner.pause
    if (!pause) throw this.cannotFreeze('pause')
    return this.serially(async () => {
      if (this.destroying || this.ended) throw new SandboxDestroyedError(this.id)
      if (this.pausedAt !== undefined) return
      const started = performance.now()
      // Refused from now on: a call let through now would wait on frozen processes.
      this.pausedAt = started
      this.stopClocks()
      try {
        await pause.call(this.inner, options)
      } catch (error) {
        this.pausedAt = undefined
        this.startClocks(0)
        this.hooks.emit({
          ...this.lifecycle('pause'),
          durationMs: performance.now() - started,
          error: describeError(error),
        })
        throw error
      }
      this.hooks.emit({ ...this.lifecycle('pause'), durationMs: performance.now() - started })
    })
  }

  async resume(options: SandboxPauseOptions = {}): Promise<void> {
    throwIfAborted(options.signal, 'resume')
    const resume = this.inner.resume
    if (!resume) throw this.cannotFreeze('resume')
    return this.serially(async () => {
      const pausedAt = this.pausedAt
      if (pausedAt === undefined) return
      if (this.destroying || this.ended) throw new SandboxDestroyedError(this.id)
      const started = performance.now()
      try {
        await resume.call(this.inner, options)
      } catch (error) {
        // Still paused: the clocks stay stopped and a later resume() tries again.
        this.hooks.emit({
          ...this.lifecycle('resume'),
          durationMs: performance.now() - started,
          error: describeError(error),
        })
        throw error
      }
      const now = performance.now()
      this.pausedAt = undefined
      this.startClocks(now - pausedAt)
      this.hooks.emit({
        ...this.lifecycle('resume'),
        durationMs: now - started,
        pausedMs: now - pausedAt,
      })
    })
  }

  async snapshot(options: SandboxSnapshotOptions = {}): Promise<SandboxSnapshot> {
    checkCaptureOptions(options, 'snapshot', ['memory', 'signal'])
    return this.capture(options, false)
  }

  /** The snapshot `fork()` takes for itself: marked so (`forFork`) for the backend's garbage collection. */
  snapshotForFork(options: SandboxSnapshotOptions): Promise<SandboxSnapshot> {
    return this.capture(options, true)
  }

  private async capture(
    options: SandboxSnapshotOptions,
    forFork: boolean,
  ): Promise<SandboxSnapshot> {
    throwIfAborted(options.signal, 'snapshot')
    const memory = options.memory === true
    const take = this.inner.snapshot
    if (!this.hooks.snapshots.files || !take)
      throw new SandboxControlRefusedError(
        'snapshot',
        this.hooks.backend,
        'this backend cannot capture a sandbox; keep what you need with readFile or readFiles',
      )
    if (memory && !this.hooks.snapshots.memory)
      throw new SandboxControlRefusedError(
        'snapshot.memory',
        this.hooks.backend,
        "this backend cannot capture a sandbox's running processes; snapshot({ memory: false }) keeps its files",
      )
    if (this.destroying || this.ended) throw new SandboxDestroyedError(this.id)
    this.refuseWhilePaused('snapshot')
    const started = performance.now()
    try {
      const taken = await this.track(() =>
        take.call(this.inner, { ...options, memory, ...(forFork ? { forFork } : {}) }),
      )
      this.hooks.emit({
        ...this.lifecycle('snapshot'),
        durationMs: performance.now() - started,
        snapshotId: taken.id,
      })
      return taken
    } catch (failure) {
      const error = failureAfterAbort(failure, options.signal, 'snapshot')
      this.hooks.emit({
        ...this.lifecycle('snapshot'),
        durationMs: performance.now() - started,
        error: describeError(error),
      })
      throw error
    }
  }

  async fork(options: SandboxForkOptions): Promise<CordonSandbox[]> {
    checkCaptureOptions(options, 'fork', ['count', 'memory', 'signal'])
    throwIfAborted(options?.signal, 'fork')
    const count = options?.count
    if (!Number.isInteger(count) || count < 1 || count > SANDBOX_FORK_MAX)
      throw new SandboxConfigValidationError('fork options', [
        {
          path: 'count',
          message: `must be a whole number from 1 to ${SANDBOX_FORK_MAX}, got ${String(count)}`,
        },
      ])
    if (!this.hooks.snapshots.files || !this.inner.snapshot)
      throw new SandboxControlRefusedError(
        'fork',
        this.hooks.backend,
        'this backend cannot capture a sandbox, so it cannot copy one; create new sandboxes instead',
      )
    if (options.memory === true && !this.hooks.snapshots.memory)
      throw new SandboxControlRefusedError(
        'fork',
        this.hooks.backend,
        "this backend cannot capture a sandbox's running processes; fork({ memory: false }) copies its files",
      )
    const memory = options.memory ?? this.hooks.snapshots.memory
    if (this.destroying || this.ended) throw new SandboxDestroyedError(this.id)
    this.refuseWhilePaused('fork')
    const started = performance.now()
    try {
      const forkWith = (withMemory: boolean) =>
        this.hooks.fork(this, {
          count,
          memory: withMemory,
          ...(options.signal ? { signal: options.signal } : {}),
        })
      const forks = await forkWith(memory).catch((error: unknown) => {
        // Memory where it can be had: a fork that did not ask for it copies the
        // files of a sandbox whose processes this backend refuses to capture
        // (refused before the sandbox is touched). One that asked is refused.
        if (
          options.memory === undefined &&
          memory &&
          SandboxControlRefusedError.isInstance(error) &&
          error.control === 'snapshot.memory'
        )
          return forkWith(false)
        throw error
      })
      this.hooks.emit({
        ...this.lifecycle('fork'),
        durationMs: performance.now() - started,
        forkedSandboxIds: forks.map((fork) => fork.id),
      })
      return forks
    } catch (failure) {
      const error = failureAfterAbort(failure, options.signal, 'fork')
      this.hooks.emit({
        ...this.lifecycle('fork'),
        durationMs: performance.now() - started,
        error: describeError(error),
      })
      throw error
    }
  }

  private cannotFreeze(control: 'pause' | 'resume'): SandboxControlRefusedError {
    return new SandboxControlRefusedError(
      control,
      this.hooks.backend,
      "this backend cannot freeze a sandbox's processes; the sandbox runs until it is destroyed",
    )
  }

  private serially(operation: () => Promise<void>): Promise<void> {
    const run = this.pauseControl.then(operation, operation)
    this.pauseControl = run.catch(() => {})
    return run
  }

  private refuseWhilePaused(operation: string): void {
    if (this.disconnecting && !this.destroying)
      throw new SandboxError(
        `${operation} refused: this process disconnected from sandbox ${this.id}; provider.connect(id) reaches it again`,
      )
    if (this.pausedAt !== undefined && !this.destroying && !this.ended)
      throw new SandboxPausedError(this.id, operation)
  }

  /** A pause stops the lifetime and idle clocks... */
  private stopClocks(): void {
    if (this.expiry) clearTimeout(this.expiry)
    if (this.idleTimer) clearTimeout(this.idleTimer)
    this.expiry = undefined
    this.idleTimer = undefined
  }

  /** ...and a resume starts them again, `pausedMs` later than where they stopped. */
  private startClocks(pausedMs: number): void {
    if (this.destroying) return
    const now = performance.now()
    if (this.expiresAt !== undefined) {
      this.expiresAt += pausedMs
      this.armExpiry()
    }
    this.lastActivity = Math.min(now, this.lastActivity + pausedMs)
    if (this.busyUntil > 0) this.busyUntil += pausedMs
    if (this.hooks.idleTimeoutMs !== undefined) this.armIdleCheck(0)
  }

  private armExpiry(): void {
    const remaining = Math.max(0, this.expiresAt! - performance.now())
    this.expiry = setTimeout(() => {
      this.hooks.emit(this.lifecycle('expired'))
      void this.end('lifetime').catch(() => {})
    }, remaining)
    this.expiry.unref?.()
  }

  /**
   * The provider's `close()`: ends the sandbox with `provider-closed`, or,
   * for a detached one, only lets go of it (it runs until its lifetime).
   */
  closeWithProvider(): Promise<void> {
    if (this.hooks.detached) return this.disconnect()
    return this.end('provider-closed')
  }

  [Symbol.asyncDispose](): Promise<void> {
    return this.destroy()
  }

  /** Ends the sandbox for `reason` (the first reason given is the one kept). */
  private end(reason: SandboxEndReason, options?: SandboxDestroyOptions): Promise<void> {
    if (this.expiry) clearTimeout(this.expiry)
    if (this.idleTimer) clearTimeout(this.idleTimer)
    this.destroying ??= this.runDestroy(reason, options)
    return this.destroying
  }

  private async runDestroy(
    reason: SandboxEndReason,
    options: SandboxDestroyOptions | undefined,
  ): Promise<void> {
    const { emit } = this.hooks
    const started = performance.now()
    this.endingFor ??= reason
    emit(this.lifecycle('destroy.start'))
    try {
      await this.inner.destroy(options)
    } catch (error) {
      // Let a later call try again.
      this.destroying = undefined
      this.endingFor = undefined
      throw error
    }
    this.ended ??= reason
    this.hooks.onDestroyed(this)
    emit({
      ...this.lifecycle('destroy.end'),
      durationMs: performance.now() - started,
      endReason: this.ended,
    })
  }

  private lifecycle(
    phase:
      | 'expired'
      | 'idle'
      | 'ended'
      | 'destroy.start'
      | 'destroy.end'
      | 'pause'
      | 'resume'
      | 'snapshot'
      | 'fork',
  ) {
    return {
      type: 'lifecycle' as const,
      phase,
      sandboxId: this.id,
      backend: this.hooks.backend,
      timestamp: Date.now(),
    }
  }

  /** Runs an operation as activity: busy while it runs, the idle clock restarted when it ends. */
  private async track<T>(operation: () => Promise<T>): Promise<T> {
    this.running++
    this.lastActivity = performance.now()
    try {
      return await operation()
    } catch (error) {
      await this.endReasonBehind(error)
      throw error
    } finally {
      this.running--
      this.lastActivity = performance.now()
    }
  }

  /**
   * A call that failed because the sandbox is gone often fails a moment
   * before the backend's notice of the end arrives (the engine's event
   * comes after the connection drops): wait for that notice, briefly, so
   * that a host reading `endReason` in its `catch` finds why (`lost`,
   * `evicted`) and can decide to retry.
   */
  private async endReasonBehind(error: unknown): Promise<void> {
    if (this.ended || this.endingFor || !this.endNoticed) return
    if (!SandboxDestroyedError.isInstance(error) && !SandboxTransportError.isInstance(error)) return
    let timer: ReturnType<typeof setTimeout> | undefined
    await Promise.race([
      this.endNoticed,
      new Promise<void>((resolve) => {
        timer = setTimeout(resolve, END_NOTICE_WAIT_MS)
      }),
    ])
    clearTimeout(timer)
  }

  /** Counts a process or terminal as running until `done` settles. */
  private holdWhile(done: Promise<unknown>): void {
    this.running++
    let held = true
    const release = (): void => {
      if (!held) return
      held = false
      this.running--
      this.lastActivity = performance.now()
    }
    done.then(release, release)
  }

  private async fileOperation<T>(
    operation: FileOperation,
    path: string,
    run: () => Promise<T>,
    known: {
      readonly bytes?: number
      readonly files?: number
      readonly measure?: (result: T) => { bytes?: number; files?: number }
    },
  ): Promise<T> {
    this.refuseWhilePaused(fileOperationName[operation])
    const started = performance.now()
    try {
      const result = await this.track(run)
      const measured = known.measure?.(result) ?? {}
      this.emitFile(operation, path, started, {
        ...(known.bytes === undefined ? {} : { bytes: known.bytes }),
        ...(known.files === undefined ? {} : { files: known.files }),
        ...measured,
      })
      return result
    } catch (error) {
      this.emitFile(operation, path, started, { error: describeError(error) })
      throw error
    }
  }

  private async readBatch(
    read: NonNullable<CordonBackendSandbox['readFiles']>,
    dir: string | undefined,
    options: SandboxReadFileOptions | undefined,
  ): Promise<AsyncIterable<SandboxFileContent>> {
    this.refuseWhilePaused('readFiles')
    const started = performance.now()
    const files = await this.track(() => read(dir, options))
    return this.countedIteration(
      files,
      (file) => file.content.length,
      'read-batch',
      dir ?? this.rootDir,
      started,
    )
  }

  /**
   * Passes an iteration through, as activity while it is consumed, and
   * reports the bytes and items it yielded when it ends.
   */
  private countedIteration<T>(
    source: AsyncIterable<T>,
    sizeOf: (item: T) => number,
    operation: FileOperation,
    path: string,
    started: number,
  ): AsyncIterable<T> {
    const self = this
    return {
      async *[Symbol.asyncIterator]() {
        let bytes = 0
        let items = 0
        self.running++
        try {
          for await (const item of source) {
            bytes += sizeOf(item)
            items++
            self.lastActivity = performance.now()
            yield item
          }
          self.emitFile(operation, path, started, {
            bytes,
            ...(operation === 'read-batch' ? { files: items } : {}),
          })
        } catch (error) {
          self.emitFile(operation, path, started, { bytes, error: describeError(error) })
          throw error
        } finally {
          self.running--
          self.lastActivity = performance.now()
        }
      },
    }
  }

  private emitFile(
    operation: FileOperation,
    path: string,
    started: number,
    details: Pick<SandboxFileEvent, 'bytes' | 'files' | 'error'>,
  ): void {
    this.hooks.emit({
      type: 'file',
      operation,
      sandboxId: this.id,
      backend: this.hooks.backend,
      timestamp: Date.now(),
      path,
      durationMs: performance.now() - started,
      ...details,
    })
  }

  private armIdleCheck(delayMs: number): void {
    // A look that was under way when the sandbox was paused arms nothing: resume() does.
    if (this.pausedAt !== undefined) return
    this.idleTimer = setTimeout(() => this.checkIdle(), Math.max(1, Math.ceil(delayMs)))
    this.idleTimer.unref?.()
  }

  /** Ends the sandbox if it has been idle long enough; otherwise looks again when it could be. */
  private checkIdle(): void {
    const idleTimeoutMs = this.hooks.idleTimeoutMs!
    // Paused: the clock is stopped, and resume() starts it again.
    if (this.destroying || this.pausedAt !== undefined) return
    const now = performance.now()
    const connections = [...this.forwards].reduce(
      (sum, forward) => sum + forward.activeConnections,
      0,
    )
    if (this.detachedProcesses.size > 0 && this.inner.listProcesses) {
      // Whether a detached process still runs is the backend's to say; asked only now.
      const list = this.inner.listProcesses.bind(this.inner)
      void list().then(
        (processes) => {
          const running = new Set(
            processes.filter((entry) => entry.status === 'running').map((entry) => entry.id),
          )
          for (const id of this.detachedProcesses)
            if (!running.has(id)) this.detachedProcesses.delete(id)
          if (this.detachedProcesses.size > 0) {
            this.lastActivity = Math.max(this.lastActivity, performance.now())
            this.armIdleCheck(idleTimeoutMs)
          } else this.checkIdle()
        },
        // Unanswered: as if still running; the next look asks again.
        () => this.armIdleCheck(idleTimeoutMs),
      )
      return
    }
    if (this.running > 0 || connections > 0 || now < this.busyUntil) {
      // Busy now: the idle clock starts no earlier than this moment.
      this.lastActivity = Math.max(this.lastActivity, now)
      this.armIdleCheck(Math.max(idleTimeoutMs, this.busyUntil - now))
      return
    }
    const idleFor = now - Math.max(this.lastActivity, this.busyUntil)
    if (idleFor >= idleTimeoutMs) {
      this.hooks.emit(this.lifecycle('idle'))
      void this.end('idle').catch(() => {})
      return
    }
    this.armIdleCheck(idleTimeoutMs - idleFor)
  }
}

/** The method a file operation of an event came through, as a paused sandbox's refusal names it. */
/** How long a failed call waits for the backend's notice that the sandbox ended. */
const END_NOTICE_WAIT_MS = 2_000

const fileOperationName: Record<FileOperation, string> = {
  write: 'writeFile',
  read: 'readFile',
  'write-stream': 'writeFileStream',
  'read-stream': 'readFileStream',
  'write-batch': 'writeFiles',
  'read-batch': 'readFiles',
  list: 'listFiles',
  stat: 'statFile',
  remove: 'removeFile',
  rename: 'renameFile',
  'make-directory': 'makeDirectory',
  watch: 'watchDirectory',
}

function byteLength(content: string | Uint8Array): number {
  return typeof content === 'string' ? globalThis.Buffer.byteLength(content) : content.length
}

/** The deepest directory every path of a batch is under (`/` at worst). */
function commonDirectory(paths: readonly string[]): string {
  const split = paths.map((path) => path.split('/').slice(0, -1))
  const first = split[0] ?? []
  let length = first.length
  for (const parts of split)
    for (let index = 0; index < length; index++)
      if (parts[index] !== first[index]) {
        length = index
        break
      }
  return first.slice(0, length).join('/') || '/'
}
