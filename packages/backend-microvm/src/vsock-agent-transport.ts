import { connect as netConnect, type Socket } from 'node:net'
import { connect as tlsConnect } from 'node:tls'
import {
  type AgentExecHandlers,
  type AgentExecSession,
  type AgentFileDownload,
  AgentRemoteError,
  authenticateToAgent,
  type ExecRequest,
  type FileEntryMessage,
  FramedConnection,
  type HealthOkMessage,
  ProtocolError,
  requestExec,
  requestHealth,
  requestListFiles,
  requestReadFile,
  requestWriteFile,
} from '@cordon/agent/protocol'
import { SandboxAbortedError, type SandboxError, sleep, type TlsClientConfig } from '@cordon/core'
import { toSandboxError } from './agent-error-mapping.js'
import type { SandboxAgentEndpoint } from './control-plane-types.js'
import { vsockConnect } from './vsock-handshake.js'

export const DEFAULT_AGENT_VSOCK_PORT = 1024

export interface VsockTransportOptions {
  /** The per-sandbox secret the agent challenges for. */
  readonly secret: string
  /** Client certificate for a `tls` endpoint (the backend's `mtls`). Required for that kind. */
  readonly tls?: TlsClientConfig
  /** Guest port for a `vsock` endpoint that names none (default 1024). */
  readonly vsockPort?: number
  /** Budget of one dial plus handshake (default 5 s). */
  readonly connectTimeoutMs?: number
  /** Dial attempts per operation before giving up (default 5). */
  readonly maxConnectAttempts?: number
  /** First pause between attempts; doubles up to 1 s (default 50 ms). */
  readonly retryDelayMs?: number
  /** Heartbeat interval on a quiet connection (default 5 s); silence of 4 intervals ends it. */
  readonly heartbeatMs?: number
}

/** A dial failure worth another attempt: nothing listening yet, or a connection reset by a resume. */
class RetryableDialError extends Error {
  constructor(message: string, options?: { cause?: unknown }) {
    super(message, options)
    this.name = 'RetryableDialError'
  }
}

/**
 * Reaches the agent in one guest. Every operation opens a fresh connection,
 * proves the secret and closes the connection when the operation ends: after
 * a snapshot resume every established connection is dead but the listener is
 * not, so nothing is kept across calls. Dialling is retried a bounded number
 * of times; authentication and protocol failures are never retried.
 *
 * Endpoints: a unix socket; Firecracker's vsock unix socket (with its
 * `CONNECT <port>` / `OK` handshake); a TLS relay that requires a client
 * certificate.
 */
export class VsockAgentTransport {
  readonly description: string

  constructor(
    readonly endpoint: SandboxAgentEndpoint,
    private readonly options: VsockTransportOptions,
  ) {
    this.description = describeEndpoint(endpoint, options.vsockPort ?? DEFAULT_AGENT_VSOCK_PORT)
  }

  /** Opens an authenticated connection (the building block of every operation). */
  async open(signal?: AbortSignal): Promise<FramedConnection> {
    const attempts = Math.max(1, this.options.maxConnectAttempts ?? 5)
    let delay = this.options.retryDelayMs ?? 50
    let lastError: unknown
    for (let attempt = 1; attempt <= attempts; attempt++) {
      if (signal?.aborted) throw new SandboxAbortedError('agent connect', { cause: signal.reason })
      let socket: Socket | undefined
      try {
        socket = await this.dial(signal)
        const connection = new FramedConnection(socket)
        const onAbort = (): void =>
          connection.destroy(new SandboxAbortedError('agent connect', { cause: signal?.reason }))
        signal?.addEventListener('abort', onAbort, { once: true })
        try {
          await authenticateToAgent(connection, this.options.secret, {
            heartbeatMs: this.options.heartbeatMs ?? 5_000,
          })
        } catch (error) {
          connection.destroy()
          // A reset before the agent's hello is a dial problem (e.g. a resume in progress); anything after is not.
          if (error instanceof AgentRemoteError || error instanceof ProtocolError) throw error
          throw new RetryableDialError((error as Error).message, { cause: error })
        } finally {
          signal?.removeEventListener('abort', onAbort)
        }
        return connection
      } catch (error) {
        socket?.destroy()
        if (!(error instanceof RetryableDialError))
          throw this.translate(error, 'agent connect', undefined, signal)
        lastError = error.cause ?? error
        if (attempt === attempts) break
        await sleep(delay, signal, 'agent connect')
        delay = Math.min(delay * 2, 1_000)
      }
    }
    throw this.translate(
      new Error(
        `no connection to the agent after ${attempts} attempts: ${(lastError as Error)?.message ?? lastError}`,
        { cause: lastError },
      ),
      'agent connect',
      undefined,
      signal,
    )
  }

  async health(signal?: AbortSignal): Promise<HealthOkMessage> {
    return this.withConnection('health', undefined, signal, (connection) =>
      requestHealth(connection),
    )
  }

  async listFiles(path: string, signal?: AbortSignal): Promise<FileEntryMessage[]> {
    return this.withConnection('listFiles', path, signal, (connection) =>
      requestListFiles(connection, path),
    )
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
      }),
    )
  }

  /** Opens a download; the returned chunks keep the connection until consumed or abandoned. */
  async readFile(path: string, signal?: AbortSignal): Promise<AgentFileDownload> {
    const connection = await this.open(signal)
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
    return { size: download.size, mode: download.mode, chunks: chunks() }
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
      throw this.translate(error, 'exec', undefined, signal)
    }
  }

  /** Translates a protocol or socket error into a cordon error naming this endpoint. */
  translate(error: unknown, operation: string, path?: string, signal?: AbortSignal): SandboxError {
    return toSandboxError(error, {
      operation,
      endpoint: this.description,
      signal,
      ...(path === undefined ? {} : { path }),
    })
  }

  private async withConnection<T>(
    operation: string,
    path: string | undefined,
    signal: AbortSignal | undefined,
    run: (connection: FramedConnection) => Promise<T>,
  ): Promise<T> {
    const connection = await this.open(signal)
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

  /** One dial attempt, including the vsock handshake or the TLS handshake. */
  private dial(signal: AbortSignal | undefined): Promise<Socket> {
    const endpoint = this.endpoint
    const timeoutMs = this.options.connectTimeoutMs ?? 5_000
    return new Promise<Socket>((resolve, reject) => {
      let settled = false
      let socket: Socket
      const finish = (error: unknown, value?: Socket): void => {
        if (settled) return
        settled = true
        clearTimeout(timer)
        signal?.removeEventListener('abort', onAbort)
        if (error) {
          socket?.destroy()
          reject(error)
        } else resolve(value!)
      }
      const onAbort = (): void =>
        finish(new SandboxAbortedError('agent connect', { cause: signal?.reason }))
      const timer = setTimeout(
        () => finish(new RetryableDialError(`dial timed out after ${timeoutMs} ms`)),
        timeoutMs,
      )
      signal?.addEventListener('abort', onAbort, { once: true })
      const retryable = (error: Error): void =>
        finish(new RetryableDialError(error.message, { cause: error }))

      if (endpoint.kind === 'tls') {
        const tls = this.options.tls
        if (!tls) {
          finish(
            new ProtocolError(
              'the agent endpoint is a TLS relay but the backend has no `mtls` client certificate',
            ),
          )
          return
        }
        socket = tlsConnect({
          host: endpoint.host,
          port: endpoint.port,
          cert: tls.cert,
          key: tls.key,
          ...(tls.ca ? { ca: tls.ca } : {}),
          servername: endpoint.servername ?? tls.servername ?? endpoint.host,
          rejectUnauthorized: true,
        })
        socket.once('secureConnect', () => finish(undefined, socket))
        socket.once('error', (error: NodeJS.ErrnoException) => {
          // A certificate the relay or we reject will not get better by retrying.
          if (/certificate|CERT|SSL|TLS|handshake/i.test(`${error.code ?? ''} ${error.message}`))
            finish(new ProtocolError(`TLS to the agent relay failed: ${error.message}`))
          else retryable(error)
        })
        return
      }
      const path = endpoint.kind === 'unix' ? endpoint.path : endpoint.udsPath
      socket = netConnect(path)
      socket.once('error', retryable)
      socket.once('connect', () => {
        if (endpoint.kind === 'unix') {
          finish(undefined, socket)
          return
        }
        vsockConnect(
          socket,
          endpoint.port ?? this.options.vsockPort ?? DEFAULT_AGENT_VSOCK_PORT,
        ).then(
          () => finish(undefined, socket),
          (error: Error) => retryable(error),
        )
      })
    })
  }
}

function describeEndpoint(endpoint: SandboxAgentEndpoint, defaultPort: number): string {
  switch (endpoint.kind) {
    case 'unix':
      return `unix:${endpoint.path}`
    case 'vsock':
      return `vsock:${endpoint.udsPath}#${endpoint.port ?? defaultPort}`
    case 'tls':
      return `tls:${endpoint.host}:${endpoint.port}`
  }
}
