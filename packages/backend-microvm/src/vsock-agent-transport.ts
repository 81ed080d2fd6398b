import { connect as netConnect, type Socket } from 'node:net'
import { connect as tlsConnect } from 'node:tls'
import { ProtocolError } from '@cordon/agent/protocol'
import {
  AgentClient,
  type AgentClientTuning,
  RetryableDialError,
  socketConnected,
} from '@cordon/agent/sandbox'
import type { TlsClientMaterial } from '@cordon/core'
import type { SandboxAgentEndpoint } from './control-plane-types.js'
import { vsockConnect } from './vsock-handshake.js'

export const DEFAULT_AGENT_VSOCK_PORT = 1024

export interface VsockTransportOptions extends AgentClientTuning {
  /** The per-sandbox secret the agent challenges for. */
  readonly secret: string
  /** Client certificate for a `tls` endpoint (the backend's `mtls`). Required for that kind. */
  readonly tls?: TlsClientMaterial
  /** Guest port for a `vsock` endpoint that names none (default 1024). */
  readonly vsockPort?: number
}

/**
 * Reaches the agent in one guest: an {@link AgentClient} (a fresh
 * authenticated connection per operation, bounded dial retries) that dials
 * the endpoint the control plane returned.
 *
 * Endpoints: a unix socket; Firecracker's vsock unix socket (with its
 * `CONNECT <port>` / `OK` handshake); a TLS relay that requires a client
 * certificate.
 */
export class VsockAgentTransport extends AgentClient {
  constructor(
    readonly endpoint: SandboxAgentEndpoint,
    options: VsockTransportOptions,
  ) {
    const { tls, vsockPort, ...client } = options
    const port = vsockPort ?? DEFAULT_AGENT_VSOCK_PORT
    super({
      ...client,
      description: describeEndpoint(endpoint, port),
      dial: (signal) => dialEndpoint(endpoint, { tls, vsockPort: port }, signal),
    })
  }
}

/** One dial attempt, including the vsock handshake or the TLS handshake. */
async function dialEndpoint(
  endpoint: SandboxAgentEndpoint,
  options: { tls: TlsClientMaterial | undefined; vsockPort: number },
  signal: AbortSignal,
): Promise<Socket> {
  if (endpoint.kind === 'tls') {
    const tls = options.tls
    if (!tls) {
      throw new ProtocolError(
        'the agent endpoint is a TLS relay but the backend has no `mtls` client certificate',
      )
    }
    const socket = tlsConnect({
      host: endpoint.host,
      port: endpoint.port,
      cert: tls.cert,
      key: tls.key,
      ...(tls.ca ? { ca: tls.ca } : {}),
      servername: endpoint.servername ?? tls.servername ?? endpoint.host,
      rejectUnauthorized: true,
    })
    return socketConnected(socket, signal, {
      event: 'secureConnect',
      // A certificate the relay or we reject will not get better by retrying.
      classify: (error) =>
        /certificate|CERT|SSL|TLS|handshake/i.test(`${error.code ?? ''} ${error.message}`)
          ? new ProtocolError(`TLS to the agent relay failed: ${error.message}`)
          : new RetryableDialError(error.message, { cause: error }),
    })
  }
  const socket = await socketConnected(
    netConnect(endpoint.kind === 'unix' ? endpoint.path : endpoint.udsPath),
    signal,
  )
  if (endpoint.kind === 'unix') return socket
  const onAbort = (): void => {
    socket.destroy()
  }
  signal.addEventListener('abort', onAbort, { once: true })
  try {
    await vsockConnect(socket, endpoint.port ?? options.vsockPort)
    return socket
  } catch (error) {
    socket.destroy()
    throw new RetryableDialError((error as Error).message, { cause: error })
  } finally {
    signal.removeEventListener('abort', onAbort)
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
