import type { Duplex } from 'node:stream'
import { SandboxAbortedError, type SandboxError, SandboxTransportError } from '@cordon/core'
import { sleep } from '@cordon/core/backend'
import {
  type AgentBatchDownload,
  type AgentExecHandlers,
  type AgentExecSession,
  type AgentFileDownload,
  AgentImpostorError,
  AgentRemoteError,
  type AgentWatch,
  authenticateToAgent,
  type BatchUploadFile,
  type ExecRequest,
  type FileEntryMessage,
  FramedConnection,
  type HealthOkMessage,
  type ProcessEntryMessage,
  ProtocolError,
  requestAdoptSession,
  requestAttach,
  requestClocks,
  requestExec,
  requestHealth,
  requestHoldHost,
  requestListFiles,
  requestListProcesses,
  requestMakeDirectory,
  requestReadFile,
  requestReadFiles,
  requestRemove,
  requestRename,
  requestSignalMarked,
  requestStat,
  requestSuspendChannel,
  requestUsage,
  requestWatch,
  requestWriteFile,
  requestWriteFiles,
  type StatOkMessage,
  type UploadStage,
  type UsageOkMessage,
} from '../protocol/index.js'
import { toSandboxError } from './agent-error-mapping.js'

/**
 * One attempt at a byte stream to the agent (a connected socket, past any
 * handshake of the endpoint's own). Reject with {@link RetryableDialError} for
 * a failure worth another attempt; anything else ends the operation. `signal`
 * fires when the caller gives up or the attempt's time runs out: release what
 * the attempt opened.
 */
export type AgentDial = (signal: AbortSignal, kind: AgentStreamKind) => Promise<Duplex>

/**
 * What a connection is for: `agent` (health, commands) or `file` (file
 * operations). Transports with one listener ignore it; the stdio channel of a
 * container routes `file` streams to the worker that acts as the sandbox's
 * user.
 */
export type AgentStreamKind = 'agent' | 'file'

/** How hard an {@link AgentClient} tries; every field has a default. */
export interface AgentClientTuning {
  /** Budget of one dial (default 5 s). */
  readonly connectTimeoutMs?: number
  /** Dial attempts per operation before giving up (default 5). */
  readonly maxConnectAttempts?: number
  /**
   * Keep dialling for this long instead of a number of attempts (for a guest
   * that is resuming); when set, `maxConnectAttempts` is not used.
   */
  readonly connectRetryBudgetMs?: number
  /** First pause between attempts; doubles up to 1 s (default 50 ms). */
  readonly retryDelayMs?: number
  /** A fixed pause between attempts instead of the doubling one. */
  readonly connectRetryIntervalMs?: number
  /** Heartbeat interval on a quiet connection (default 5 s); silence of 4 intervals ends it. */
  readonly heartbeatMs?: number
}

export interface AgentClientOptions extends AgentClientTuning {
  /** The per-sandbox secret the agent challenges for. */
  readonly secret: string
  /** Opens the byte stream; see {@link AgentDial}. */
  readonly dial: AgentDial
  /** The endpoint as errors name it, e.g. `tcp:10.0.0.4:7070`. */
  readonly description: string
  /**
   * Keep one connection of each kind already open and authenticated, so an
   * operation costs one round trip instead of three. For channels whose
   * connections are cheap and survive (a container's stdio); not for a guest
   * that may be snapshotted, where an idle connection dies on resume.
   */
  readonly keepSpareConnection?: boolean
  /** Told when a connection starts or stops waiting as a spare (a channel may then not count it as work). */
  readonly onSpare?: (stream: Duplex, spare: boolean) => void
  /**
   * Where uploads may hand the agent pieces as files (see `UploadStage`),
   * asked at each upload: a backend's stage can come and go with the
   * sandbox's socket (a restore finds it anew). Undefined: bytes only.
   */
  readonly uploadStage?: () => UploadStage | undefined
}

/** A dial failure worth another attempt: nothing listening yet, or a connection reset by a resume. */
export class RetryableDialError extends Error {
  constructor(message: string, options?: { cause?: unknown }) {
    super(message, options)
    this.name = 'RetryableDialError'
  }
}

/**
 * Reaches the agent in one sandbox. Every operation opens a fresh connection,
 * proves the secret and closes the connection when the operation ends: after
 * a snapshot resume every established connection is dead but the listener is
 * not, so nothing is kept across calls. Dialling is retried a bounded number
 * of times; authentication and protocol failures are never retried. Errors
 * come out as `@cordon/core` errors naming {@link AgentClient.description}.
 *
 * How the stream is opened is the backend's `dial` (see `dialTcp`).
 */
export class AgentClient {
  readonly description: string
  private readonly spares = new Map<AgentStreamKind, Promise<FramedConnection | undefined>>()
  private keepsSpares: boolean
  private closed = false
  /** Whether an operation has taken a connection yet (see {@link open}). */
  private operatedOnce = false
  /** Every authenticated connection still open (spares, commands, downloads). */
  private readonly live = new Set<FramedConnection>()
  private idleHeld = false
  /** The secret proved on every new connection (see {@link rekey}). */
  private secret: string

  constructor(private readonly options: AgentClientOptions) {
    this.description = options.description
    this.keepsSpares = options.keepSpareConnection ?? false
    this.secret = options.secret
  }

  /**
   * Asks a stdio agent to end its channel's session and wait for a resume
   * line (before a memory snapshot); the spare connections, which were on
   * that session, are dropped. Later operations need {@link rekey} and a
   * new channel.
   */
  async suspendChannel(
    signal?: AbortSignal,
    options: { readonly refuseOpenTcp?: boolean; readonly waitForCloseMs?: number } = {},
  ): Promise<void> {
    await this.withConnection('suspend-channel', undefined, signal, (connection) =>
      requestSuspendChannel(connection, options),
    )
    this.dropSpares()
  }

  /**
   * Proves the secret on `stream` (a connection to a detached agent's
   * direct socket, dialled by the backend) and asks the agent to serve its
   * session on it (`adopt-session`); resolves with the stream, which then
   * carries the session multiplexer (the host its initiator). Errors as any
   * operation's; the stream is destroyed on failure.
   */
  async adoptSession(stream: Duplex, signal?: AbortSignal): Promise<Duplex> {
    const connection = await this.authenticateDialled(stream, signal, 'adopt-session')
    const onAbort = (): void =>
      connection.destroy(new SandboxAbortedError('adopt-session', { cause: signal?.reason }))
    signal?.addEventListener('abort', onAbort, { once: true })
    try {
      return await requestAdoptSession(connection)
    } catch (error) {
      connection.destroy()
      stream.destroy()
      throw this.translate(error, 'adopt-session', undefined, signal)
    } finally {
      signal?.removeEventListener('abort', onAbort)
    }
  }

  /**
   * From now on proves `secret` (the one a resume line gave the agent);
   * every connection kept so far is dropped.
   */
  rekey(secret: string): void {
    this.secret = secret
    this.dropSpares()
  }

  private dropSpares(): void {
    for (const spare of this.spares.values()) void spare.then((connection) => connection?.destroy())
    this.spares.clear()
  }

  /**
   * Dials and authenticates a command connection and keeps it as the spare
   * for the next operation (unless one is kept already: then it is closed);
   * from then on the client keeps spares (as
   * {@link AgentClientOptions.keepSpareConnection} does). Resolves once the
   * agent has accepted the secret: the proof of readiness that
   * `waitForAgentConnection` uses. Errors as any operation's.
   */
  async openSpareConnection(signal?: AbortSignal): Promise<void> {
    this.keep(await this.dialAndAuthenticate(signal, 'agent'))
  }

  /**
   * As {@link openSpareConnection}, on a stream the backend has dialled
   * itself (one that had to wait for the agent to listen).
   */
  async adoptSpareConnection(stream: Duplex, signal?: AbortSignal): Promise<void> {
    this.keep(await this.authenticateDialled(stream, signal, 'agent connect'))
  }

  /**
   * Proves the secret on a stream the backend dialled itself; on failure the
   * stream is destroyed and the error translated as `operation`'s (a dial
   * error's cause, since no retry dials this stream again).
   */
  private async authenticateDialled(
    stream: Duplex,
    signal: AbortSignal | undefined,
    operation: string,
  ): Promise<FramedConnection> {
    try {
      return await this.authenticate(stream, signal)
    } catch (error) {
      stream.destroy()
      throw this.translate(
        error instanceof RetryableDialError ? (error.cause ?? error) : error,
        operation,
        undefined,
        signal,
      )
    }
  }

  private keep(connection: FramedConnection): void {
    // The first kept wins: a backend that tries two ways at once (see the
    // Docker backend) may authenticate both, and the first may already be
    // the one its first operation is about to take.
    if (this.closed || this.spares.has('agent')) {
      connection.destroy()
      return
    }
    this.keepsSpares = true
    this.options.onSpare?.(connection.socket, true)
    this.spares.set('agent', Promise.resolve(connection))
  }

  /**
   * An authenticated connection (the building block of every operation): the
   * spare one if it is still up, else a fresh one.
   */
  async open(signal?: AbortSignal, kind: AgentStreamKind = 'agent'): Promise<FramedConnection> {
    if (!this.keepsSpares || this.closed) return this.dialAndAuthenticate(signal, kind)
    const spare = this.spares.get(kind)
    this.spares.delete(kind)
    const ready = spare ? await spare : undefined
    const connection =
      ready && !ready.isClosed ? ready : await this.dialAndAuthenticate(signal, kind)
    if (connection !== ready) ready?.destroy()
    else this.options.onSpare?.(connection.socket, false)
    // The next spare is made while this operation runs (an agent's tool loop
    // calls back to back, and a spare made only after this one closed would
    // still be shaking hands when the next call comes), but only once the
    // agent has answered this one: the agent serves one connection at a
    // time, and a handshake it took first would delay this operation. The
    // first operation of a client waits for its end instead: on an agent
    // that has just started, a handshake costs milliseconds of its one
    // thread (code run for the first time), which this operation's answer
    // would wait behind.
    const first = !this.operatedOnce
    this.operatedOnce = true
    let prepared = false
    const prepareNext = (): void => {
      if (prepared) return
      prepared = true
      setImmediate(() => this.prepareSpare(kind))
    }
    if (!first) connection.socket.once('data', prepareNext)
    connection.socket.once('close', prepareNext)
    return connection
  }

  /** Closes the spare connections; later operations dial afresh. */
  close(): void {
    this.closed = true
    for (const spare of this.spares.values()) void spare.then((connection) => connection?.destroy())
    this.spares.clear()
  }

  private prepareSpare(kind: AgentStreamKind): void {
    if (this.closed || this.spares.has(kind)) return
    const spare = this.dialAndAuthenticate(undefined, kind).then(
      (connection) => {
        if (this.closed) {
          connection.destroy()
          return undefined
        }
        this.options.onSpare?.(connection.socket, true)
        return connection
      },
      () => {
        this.spares.delete(kind)
        return undefined
      },
    )
    this.spares.set(kind, spare)
  }

  private async dialAndAuthenticate(
    signal: AbortSignal | undefined,
    kind: AgentStreamKind,
  ): Promise<FramedConnection> {
    const budget = this.options.connectRetryBudgetMs
    const attempts =
      budget === undefined ? Math.max(1, this.options.maxConnectAttempts ?? 5) : Infinity
    const fixedDelay = this.options.connectRetryIntervalMs
    let delay = fixedDelay ?? this.options.retryDelayMs ?? 50
    const started = performance.now()
    let lastError: unknown
    let attempt = 0
    for (attempt = 1; attempt <= attempts; attempt++) {
      if (signal?.aborted) throw new SandboxAbortedError('agent connect', { cause: signal.reason })
      let stream: Duplex | undefined
      try {
        stream = await this.dialOnce(signal, kind)
        return await this.authenticate(stream, signal)
      } catch (error) {
        stream?.destroy()
        if (!(error instanceof RetryableDialError))
          throw this.translate(error, 'agent connect', undefined, signal)
        lastError = error.cause ?? error
        if (attempt === attempts) break
        if (budget !== undefined && performance.now() - started + delay > budget) break
        await sleep(delay, signal, 'agent connect')
        if (fixedDelay === undefined) delay = Math.min(delay * 2, 1_000)
      }
    }
    throw this.translate(
      new Error(
        `no connection to the agent after ${Math.min(attempt, attempts)} attempts: ${(lastError as Error)?.message ?? lastError}`,
        { cause: lastError },
      ),
      'agent connect',
      undefined,
      signal,
    )
  }

  /** Shakes hands on a stream just dialled; a failure before the agent's hello may be retried. */
  private async authenticate(
    stream: Duplex,
    signal: AbortSignal | undefined,
  ): Promise<FramedConnection> {
    const connection = new FramedConnection(stream)
    const onAbort = (): void =>
      connection.destroy(new SandboxAbortedError('agent connect', { cause: signal?.reason }))
    signal?.addEventListener('abort', onAbort, { once: true })
    try {
      await authenticateToAgent(connection, this.secret, {
        heartbeatMs: this.options.heartbeatMs ?? 5_000,
      })
    } catch (error) {
      connection.destroy()
      // A reset before the agent's hello is a dial problem (e.g. a resume in progress); anything after is
      // not, and a peer that fails to prove the secret is never dialled into again as if it might.
      if (
        error instanceof AgentRemoteError ||
        error instanceof ProtocolError ||
        error instanceof AgentImpostorError
      )
        throw error
      throw new RetryableDialError((error as Error).message, { cause: error })
    } finally {
      signal?.removeEventListener('abort', onAbort)
    }
    this.live.add(connection)
    connection.onClose(() => this.live.delete(connection))
    if (this.idleHeld) connection.holdIdle(true)
    return connection
  }

  /** Whether the host keeps the agent frozen now ({@link holdIdle}). */
  get isIdleHeld(): boolean {
    return this.idleHeld
  }

  /**
   * Stops (or restarts) judging the agent's silence on every connection,
   * open now or opened meanwhile: for the time the host keeps the sandbox
   * frozen, when the agent cannot answer a heartbeat and is not gone.
   */
  holdIdle(held: boolean): void {
    this.idleHeld = held
    for (const connection of this.live) connection.holdIdle(held)
  }

  /**
   * Asks the agent to hold its deadlines (the lifetime, command timeouts)
   * before the sandbox is frozen, or to let them run again once it is
   * thawed; resolves with how long they were held (see deadline-clock.ts).
   */
  async clocks(type: 'pause-clocks' | 'resume-clocks', signal?: AbortSignal): Promise<number> {
    return this.withConnection(type, undefined, signal, (connection) =>
      requestClocks(connection, type),
    )
  }

  /**
   * Holds the sandbox to this host (see `HoldHostRequest`): resolves with
   * the connection once the agent has answered. It is its own connection,
   * never a spare; it carries heartbeats only, and its close is this host's
   * going (see host-hold-keeper.ts).
   */
  async holdHost(graceMs: number, signal?: AbortSignal): Promise<FramedConnection> {
    const connection = await this.dialAndAuthenticate(signal, 'agent')
    try {
      await requestHoldHost(connection, graceMs)
      return connection
    } catch (error) {
      connection.destroy()
      throw this.translate(error, 'hold-host', undefined, signal)
    }
  }

  private transportFailureListener: (() => void) | undefined

  async health(signal?: AbortSignal): Promise<HealthOkMessage> {
    return this.withConnection('health', undefined, signal, (connection) =>
      requestHealth(connection),
    )
  }

  /** Signals the processes carrying `marker` (a program the engine started; see process-tree.ts). */
  async signalMarked(
    marker: string,
    name: 'SIGKILL' | 'SIGTERM' | 'SIGHUP',
    signal?: AbortSignal,
  ): Promise<number> {
    return this.withConnection('signal', undefined, signal, (connection) =>
      requestSignalMarked(connection, marker, name),
    )
  }

  /** Uploads many files on one file connection (see `requestWriteFiles`). */
  async writeFiles(
    directory: string,
    files: Iterable<BatchUploadFile>,
    signal?: AbortSignal,
  ): Promise<{ files: number; bytes: number }> {
    return this.withConnection('writeFiles', directory, signal, (connection) =>
      requestWriteFiles(connection, files, { stage: this.options.uploadStage?.() }),
    )
  }

  async usage(signal?: AbortSignal): Promise<UsageOkMessage> {
    return this.withConnection('usage', undefined, signal, (connection) => requestUsage(connection))
  }

  async listFiles(path: string, signal?: AbortSignal): Promise<FileEntryMessage[]> {
    return this.withConnection('listFiles', path, signal, (connection) =>
      requestListFiles(connection, path),
    )
  }

  /**
   * Makes `path` a directory as the sandbox's user, inside the write roots;
   * resolves with whether it was made. With `strict` (the file API), a
   * directory that exists outside the write roots is refused too.
   */
  async makeDirectory(
    path: string,
    signal?: AbortSignal,
    options: { strict?: boolean; mode?: number } = {},
  ): Promise<boolean> {
    return this.withConnection('makeDirectory', path, signal, (connection) =>
      requestMakeDirectory(connection, path, options),
    )
  }

  /** What is at `path` (a link itself unless `followLinks`). */
  async stat(path: string, followLinks: boolean, signal?: AbortSignal): Promise<StatOkMessage> {
    return this.withConnection('statFile', path, signal, (connection) =>
      requestStat(connection, path, followLinks),
    )
  }

  async remove(path: string, recursive: boolean, signal?: AbortSignal): Promise<void> {
    return this.withConnection('removeFile', path, signal, (connection) =>
      requestRemove(connection, path, recursive),
    )
  }

  async rename(from: string, to: string, signal?: AbortSignal): Promise<void> {
    return this.withConnection('renameFile', from, signal, (connection) =>
      requestRename(connection, from, to),
    )
  }

  /** The processes started with `keep`. */
  async listProcesses(signal?: AbortSignal): Promise<readonly ProcessEntryMessage[]> {
    return this.withConnection('listProcesses', undefined, signal, (connection) =>
      requestListProcesses(connection),
    )
  }

  /**
   * Watches a directory on a file connection of its own, which lives until
   * the watch is stopped; its changes and failures come out translated.
   */
  async watch(path: string, recursive: boolean, signal?: AbortSignal): Promise<AgentWatch> {
    const connection = await this.open(signal, 'file')
    let watch: AgentWatch
    try {
      watch = await requestWatch(connection, path, recursive)
    } catch (error) {
      connection.destroy()
      throw this.translate(error, 'watchDirectory', path, signal)
    }
    const translate = (error: unknown): SandboxError =>
      this.translate(error, 'watchDirectory', path)
    return {
      changes: {
        async *[Symbol.asyncIterator]() {
          try {
            for await (const batch of watch.changes) yield batch
          } catch (error) {
            throw translate(error)
          }
        },
      },
      stop: () => watch.stop(),
    }
  }

  /** Attaches to a command started with `keep` (see `requestAttach`). */
  async attach(
    id: string,
    stdin: boolean,
    handlers: AgentExecHandlers,
    signal?: AbortSignal,
  ): Promise<{ session: AgentExecSession; droppedBytes: number }> {
    const connection = await this.open(signal)
    const onAbort = (): void =>
      connection.destroy(new SandboxAbortedError('attachProcess', { cause: signal?.reason }))
    signal?.addEventListener('abort', onAbort, { once: true })
    try {
      return await requestAttach(connection, id, stdin, handlers)
    } catch (error) {
      connection.destroy()
      throw this.translate(error, 'attachProcess', undefined, signal)
    } finally {
      signal?.removeEventListener('abort', onAbort)
    }
  }

  async writeFile(
    path: string,
    source: AsyncIterable<Uint8Array>,
    options: { mode?: number; size?: number; signal?: AbortSignal },
  ): Promise<number> {
    return this.withConnection('writeFile', path, options.signal, (connection) =>
      requestWriteFile(connection, path, source, {
        ...(options.mode === undefined ? {} : { mode: options.mode }),
        ...(options.size === undefined ? {} : { size: options.size }),
        stage: this.options.uploadStage?.(),
      }),
    )
  }

  /**
   * Lists every regular file under `path` on one connection and, on
   * `proceed()`, streams them whole (see `requestReadFiles`); the connection
   * lives until the files are consumed or abandoned.
   */
  async readFiles(path: string, signal?: AbortSignal): Promise<AgentBatchDownload> {
    const connection = await this.open(signal, 'file')
    const onAbort = (): void =>
      connection.destroy(new SandboxAbortedError('readFiles', { cause: signal?.reason }))
    signal?.addEventListener('abort', onAbort, { once: true })
    let batch: AgentBatchDownload
    try {
      batch = await requestReadFiles(connection, path)
    } catch (error) {
      signal?.removeEventListener('abort', onAbort)
      connection.destroy()
      throw this.translate(error, 'readFiles', path, signal)
    }
    const translate = (error: unknown): SandboxError =>
      this.translate(error, 'readFiles', path, signal)
    return {
      entries: batch.entries,
      async *proceed() {
        try {
          for await (const file of batch.proceed()) yield file
        } catch (error) {
          throw translate(error)
        } finally {
          signal?.removeEventListener('abort', onAbort)
        }
      },
      abandon: () => {
        signal?.removeEventListener('abort', onAbort)
        batch.abandon()
      },
    }
  }

  /** Opens a download; the returned chunks keep the connection until consumed or abandoned. */
  async readFile(path: string, signal?: AbortSignal): Promise<AgentFileDownload> {
    const connection = await this.open(signal, 'file')
    const onAbort = (): void =>
      connection.destroy(new SandboxAbortedError('readFile', { cause: signal?.reason }))
    signal?.addEventListener('abort', onAbort, { once: true })
    let download: AgentFileDownload
    try {
      download = await requestReadFile(connection, path)
    } catch (error) {
      signal?.removeEventListener('abort', onAbort)
      connection.destroy()
      throw this.translate(error, 'readFile', path, signal)
    }
    const translate = (error: unknown): SandboxError =>
      this.translate(error, 'readFile', path, signal)
    async function* chunks(): AsyncGenerator<Uint8Array> {
      try {
        for await (const chunk of download.chunks) yield chunk
      } catch (error) {
        throw translate(error)
      } finally {
        signal?.removeEventListener('abort', onAbort)
      }
    }
    return {
      size: download.size,
      mode: download.mode,
      chunks: chunks(),
      abandon: () => {
        signal?.removeEventListener('abort', onAbort)
        download.abandon()
      },
    }
  }

  /** Starts a command; the session's connection lives as long as the command. */
  async startExec(
    request: Omit<ExecRequest, 'type'>,
    handlers: AgentExecHandlers,
    signal?: AbortSignal,
  ): Promise<AgentExecSession> {
    const connection = await this.open(signal)
    try {
      return await requestExec(connection, request, handlers)
    } catch (error) {
      connection.destroy()
      throw this.translate(error, 'exec', request.cwd, signal)
    }
  }

  /** Translates a protocol or socket error into a cordon error naming this endpoint. */
  translate(error: unknown, operation: string, path?: string, signal?: AbortSignal): SandboxError {
    const translated = toSandboxError(error, {
      operation,
      endpoint: this.description,
      signal,
      ...(path === undefined ? {} : { path }),
    })
    if (SandboxTransportError.isInstance(translated)) this.transportFailureListener?.()
    return translated
  }

  /**
   * Calls `listener` whenever an operation fails because the agent could not
   * be reached or the connection broke: the moment to ask the platform
   * whether the sandbox itself is gone.
   */
  onTransportFailure(listener: () => void): void {
    this.transportFailureListener = listener
  }

  private async withConnection<T>(
    operation: string,
    path: string | undefined,
    signal: AbortSignal | undefined,
    run: (connection: FramedConnection) => Promise<T>,
  ): Promise<T> {
    // A path means a file operation.
    const connection = await this.open(signal, path === undefined ? 'agent' : 'file')
    const onAbort = (): void =>
      connection.destroy(new SandboxAbortedError(operation, { cause: signal?.reason }))
    signal?.addEventListener('abort', onAbort, { once: true })
    try {
      return await run(connection)
    } catch (error) {
      connection.destroy()
      throw this.translate(error, operation, path, signal)
    } finally {
      signal?.removeEventListener('abort', onAbort)
    }
  }

  /**
   * One dial attempt within `connectTimeoutMs` and the caller's signal. When
   * either ends the attempt, the dial's own signal fires, and a stream that
   * still arrives afterwards is destroyed.
   */
  private dialOnce(signal: AbortSignal | undefined, kind: AgentStreamKind): Promise<Duplex> {
    const timeoutMs = this.options.connectTimeoutMs ?? 5_000
    const attempt = new AbortController()
    return new Promise<Duplex>((resolve, reject) => {
      let settled = false
      const finish = (error: unknown, stream?: Duplex): void => {
        if (settled) {
          stream?.destroy()
          return
        }
        settled = true
        clearTimeout(timer)
        signal?.removeEventListener('abort', onAbort)
        if (error) {
          attempt.abort(error)
          reject(error)
        } else resolve(stream!)
      }
      const onAbort = (): void =>
        finish(new SandboxAbortedError('agent connect', { cause: signal?.reason }))
      const timer = setTimeout(
        () => finish(new RetryableDialError(`dial timed out after ${timeoutMs} ms`)),
        timeoutMs,
      )
      signal?.addEventListener('abort', onAbort, { once: true })
      let dialing: Promise<Duplex>
      try {
        dialing = this.options.dial(attempt.signal, kind)
      } catch (error) {
        dialing = Promise.reject(error)
      }
      dialing.then(
        (stream) => finish(undefined, stream),
        (error: unknown) => finish(error ?? new Error('the dial failed')),
      )
    })
  }
}
