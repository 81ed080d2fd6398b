import { Buffer } from 'node:buffer'
import { connect as netConnect, type Socket } from 'node:net'
import { connect as tlsConnect } from 'node:tls'
import { AgentRemoteError, ProtocolError } from '@cordon/agent/protocol'
import {
  AgentClient,
  AgentProcess,
  RetryableDialError,
  socketConnected,
  waitForAgent,
} from '@cordon/agent/sandbox'
import type {
  SandboxAgentHandle,
  VsockExecuteRequest,
  VsockTransportOptions,
} from '@cordon/builtin-backends'
import {
  type AgentHealthReport,
  SandboxAbortedError,
  SandboxCreateTimeoutError,
  type SandboxExecResult,
  type TlsClientMaterial,
} from '@cordon/core'
import { ExecOutputCollector, requireAgentSecret } from '@cordon/core/backend'
import type { SandboxAgentEndpoint } from './control-plane-types.js'
import { vsockConnect } from './vsock-handshake.js'

export const DEFAULT_AGENT_VSOCK_PORT = 1024

/** {@link VsockTransportOptions} plus the client's finer tuning (heartbeat, first retry pause). */
export type VsockTransportTuning = VsockTransportOptions & {
  readonly heartbeatMs?: number
  readonly retryDelayMs?: number
}

/** Where an agent is: a handle in the reference's shape, or an endpoint as the control plane returns it. */
export type AgentAddress = SandboxAgentHandle | SandboxAgentEndpoint

/**
 * Reaches the agent in one guest, with the reference's methods (`healthz`,
 * `waitForReady`, `execute`, `readFile`, `writeFile`) and cordon's `health`
 * (the agent's whole answer). Underneath is an
 * {@link AgentClient} (`client`): a fresh authenticated connection per
 * operation, bounded dial retries, which is what the microVM backend's
 * sandboxes use.
 */
export class VsockAgentTransport {
  readonly client: AgentClient
  readonly description: string

  constructor(
    readonly handle: AgentAddress,
    options: VsockTransportTuning = {},
  ) {
    const { tls, vsockPort, secret, readIdleTimeoutMs, ...tuning } = options
    requireAgentSecret(secret, 'VsockAgentTransport options')
    const port = vsockPort ?? DEFAULT_AGENT_VSOCK_PORT
    this.description = describeAddress(handle, port)
    this.client = new AgentClient({
      ...tuning,
      ...(readIdleTimeoutMs === undefined
        ? {}
        : { heartbeatMs: Math.max(250, Math.floor(readIdleTimeoutMs / 4)) }),
      secret: secret!,
      description: this.description,
      dial: (signal) => dialAddress(handle, { tls, vsockPort: port }, signal),
    })
  }

  /**
   * The reference's probe: `true` when the agent answers a health request
   * over an authenticated connection, `false` when it cannot be reached or
   * does not answer so (a guest still booting, a relay that refuses). A
   * secret the agent refuses is not a state to poll through: it rejects with
   * `SandboxTransportError`, as an abort does with `SandboxAbortedError`.
   */
  async healthz(signal?: AbortSignal): Promise<boolean> {
    try {
      await this.client.health(signal)
      return true
    } catch (error) {
      if (SandboxAbortedError.isInstance(error) || refusedOurSecret(error)) throw error
      return false
    }
  }

  /** One health round trip over an authenticated connection: the agent's answer (its roots, its resumes). */
  health(signal?: AbortSignal): Promise<AgentHealthReport> {
    return this.client.health(signal)
  }

  /**
   * Polls health every `pollIntervalMs` until the agent answers; rejects with
   * `SandboxCreateTimeoutError` after `timeoutMs`, or at once with
   * `SandboxReadinessError` if the agent answers but cannot be used.
   */
  async waitForReady(timeoutMs: number, pollIntervalMs = 250): Promise<AgentHealthReport> {
    const deadline = AbortSignal.timeout(timeoutMs)
    try {
      return await waitForAgent(this.client, this.description, deadline, pollIntervalMs)
    } catch (error) {
      if (deadline.aborted) {
        throw new SandboxCreateTimeoutError(timeoutMs, 'agent.health', { cause: error })
      }
      throw error
    }
  }

  /** Runs one command to its end (argv, never a shell) and returns its result. */
  async execute(request: VsockExecuteRequest): Promise<SandboxExecResult> {
    const collector = new ExecOutputCollector({})
    const session = await this.client.startExec(
      {
        command: request.command,
        args: [...(request.args ?? [])],
        env: { ...request.env },
        ...(request.cwd === undefined ? {} : { cwd: request.cwd }),
        stdin: request.stdin !== undefined,
        ...(request.timeoutMs === undefined
          ? {}
          : { timeoutMs: Math.max(1, Math.ceil(request.timeoutMs)) }),
      },
      {
        onStdout: (bytes) => collector.push('stdout', bytes),
        onStderr: (bytes) => collector.push('stderr', bytes),
      },
      request.signal,
    )
    const process = new AgentProcess(
      session,
      collector,
      {
        sandboxId: this.description,
        client: this.client,
        isDestroyed: () => false,
        onSettled: () => {},
      },
      request.signal,
    )
    if (request.stdin !== undefined) {
      await process
        .write(request.stdin)
        .then(() => process.closeStdin())
        // A command that exits without reading its input still has a result.
        .catch(() => {})
    }
    return process.wait()
  }

  /** Writes a whole file (creating parent directories), streamed in 64 KiB frames. */
  async writeFile(path: string, content: string | Uint8Array, signal?: AbortSignal): Promise<void> {
    const bytes = typeof content === 'string' ? Buffer.from(content) : content
    await this.client.writeFile(path, oneChunk(bytes), {
      size: bytes.byteLength,
      ...(signal ? { signal } : {}),
    })
  }

  /** Reads a whole file into a `Buffer`. */
  async readFile(path: string, signal?: AbortSignal): Promise<Buffer> {
    const download = await this.client.readFile(path, signal)
    const chunks: Uint8Array[] = []
    for await (const chunk of download.chunks) chunks.push(chunk)
    return Buffer.concat(chunks)
  }
}

/** Whether the agent answered but refused this host's proof of the secret. */
function refusedOurSecret(error: unknown): boolean {
  const cause = (error as { cause?: unknown } | undefined)?.cause
  return cause instanceof AgentRemoteError && cause.code === 'unauthorized'
}

async function* oneChunk(bytes: Uint8Array): AsyncGenerator<Uint8Array> {
  if (bytes.byteLength > 0) yield bytes
}

/** One dial attempt, including the vsock, TLS and relay-routing handshakes. */
async function dialAddress(
  address: AgentAddress,
  options: { tls: TlsClientMaterial | undefined; vsockPort: number },
  signal: AbortSignal,
): Promise<Socket> {
  if (address.kind === 'tls' || address.kind === 'mtls') {
    const tls = 'tls' in address && address.tls ? address.tls : options.tls
    if (!tls) {
      throw new ProtocolError(
        'the agent endpoint is a TLS relay but the backend has no `mtls` client certificate',
      )
    }
    const socket = tlsConnect({
      host: address.host,
      port: address.port,
      cert: tls.cert,
      key: tls.key,
      ...(tls.ca ? { ca: tls.ca } : {}),
      servername:
        (address.kind === 'tls' ? address.servername : undefined) ?? tls.servername ?? address.host,
      rejectUnauthorized: true,
    })
    const connected = await socketConnected(socket, signal, {
      event: 'secureConnect',
      // A certificate the relay or we reject will not get better by retrying.
      classify: (error) =>
        /certificate|CERT|SSL|TLS|handshake/i.test(`${error.code ?? ''} ${error.message}`)
          ? new ProtocolError(`TLS to the agent relay failed: ${error.message}`)
          : new RetryableDialError(error.message, { cause: error }),
    })
    // A per-host relay learns which guest from one line, then only moves bytes.
    if (address.kind === 'mtls') connected.write(`SANDBOX ${address.sandboxId}\n`)
    return connected
  }
  const socket = await socketConnected(
    netConnect(address.kind === 'unix' ? address.path : address.udsPath),
    signal,
  )
  if (address.kind === 'unix') return socket
  const onAbort = (): void => {
    socket.destroy()
  }
  signal.addEventListener('abort', onAbort, { once: true })
  try {
    await vsockConnect(socket, address.port ?? options.vsockPort)
    return socket
  } catch (error) {
    socket.destroy()
    throw new RetryableDialError((error as Error).message, { cause: error })
  } finally {
    signal.removeEventListener('abort', onAbort)
  }
}

function describeAddress(address: AgentAddress, defaultPort: number): string {
  switch (address.kind) {
    case 'unix':
      return `unix:${address.path}`
    case 'vsock':
      return `vsock:${address.udsPath}#${address.port ?? defaultPort}`
    case 'tls':
      return `tls:${address.host}:${address.port}`
    case 'mtls':
      return `mtls:${address.host}:${address.port}/${address.sandboxId}`
  }
}
