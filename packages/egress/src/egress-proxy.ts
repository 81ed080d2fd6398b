/**
 * The egress proxy: an HTTP proxy (plain forwarding and CONNECT) that applies
 * an egress policy per client, screens every address it would dial, brokers
 * credentials and reports one decision event per request or tunnel.
 *
 * Construction validates and does no I/O; `listen` binds. Policy changes
 * (`setPolicy`, `setClientPolicy`, `removeClient`) apply to connections that
 * start afterwards.
 */
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http'
import {
  type AddressInfo,
  createServer as createNetServer,
  type Server as NetServer,
  type Socket,
} from 'node:net'
import { type EgressPolicy, type EgressReasonCode, SandboxAbortedError } from '@cordon/core'
import { parseConfig, throwIfAborted } from '@cordon/core/backend'
import { TunnelSlots } from './admission.js'
import { handleConnect } from './connect-tunnel.js'
import { CredentialBroker } from './credential-broker.js'
import { buildDecisionEvent, type EgressDecisionListener, safeListener } from './decision-event.js'
import { refuseOnSocket } from './denial.js'
import { handleRequest } from './http-forward.js'
import {
  clientRegistrationSchema,
  type EgressProxyOptions,
  type ResolvedOptions,
  resolveOptions,
  validatePolicy,
} from './options.js'
import { type ClientPolicy, canonicalClientAddress, PolicyState } from './policy-state.js'
import type { ProxyRuntime } from './proxy-runtime.js'
import { ProxySelf } from './proxy-self.js'
import { systemResolver } from './resolve-and-screen.js'
import { TunnelReadBuffers } from './tunnel-read-buffers.js'

export interface EgressListenOptions {
  /** Address to bind. Default `127.0.0.1`; a gateway binds its sandbox-facing address. */
  readonly host?: string
  /** Port to bind; `0` (the default) picks a free one. */
  readonly port?: number
  readonly signal?: AbortSignal
}

export interface RunningEgressProxy {
  readonly host: string
  readonly port: number
  /** `http://host:port`, what a client puts in `HTTP_PROXY`/`HTTPS_PROXY`. */
  readonly url: string
  /**
   * The reference's way to change the policy: the allowlist closure asked for
   * connections that start afterwards (`setPolicy` with a `resolver`).
   */
  setAllowedHosts(resolve: () => Promise<readonly string[]>): void
  /** Stops accepting, ends every open tunnel and exchange; idempotent. */
  close(): Promise<void>
}

/** Read buffer of one tunnel's upstream socket (libuv reads 64 KiB at a time anyway). */
const TUNNEL_READ_BYTES = 64 * 1024
/** Read buffers kept for later tunnels: 4 MiB at most. */
const KEPT_READ_BUFFERS = 64

/** Parser failures that are about message length: the request-smuggling family. */
const FRAMING_ERRORS = new Set([
  'HPE_INVALID_CONTENT_LENGTH',
  'HPE_UNEXPECTED_CONTENT_LENGTH',
  'HPE_INVALID_TRANSFER_ENCODING',
  'HPE_INVALID_CHUNK_SIZE',
])

export class EgressProxy {
  readonly #options: ResolvedOptions
  readonly #state: PolicyState
  readonly #self = new ProxySelf()
  readonly #slots: TunnelSlots
  readonly #sockets = new Set<Socket>()
  readonly #emit: EgressDecisionListener
  #server: Server | undefined
  readonly #unixListeners = new Set<NetServer>()
  #closing: Promise<void> | undefined

  constructor(options: EgressProxyOptions = {}) {
    this.#options = resolveOptions(options)
    this.#emit = safeListener(this.#options.onDecision)
    this.#state = new PolicyState(
      this.#options.policy,
      new CredentialBroker(this.#options.brokeredCredentials),
      {
        requireClientPolicy: this.#options.requireClientPolicy,
        resolverCacheTtlMs: this.#options.resolverCacheTtlMs,
        resolverTimeoutMs: this.#options.limits.resolverTimeoutMs,
      },
    )
    this.#slots = new TunnelSlots(
      this.#options.limits.maxTunnels,
      this.#options.limits.maxTunnelsPerClient,
    )
  }

  /**
   * Serves a unix socket whose every connection belongs to one client: the
   * client is identified by the socket it came through, not by a source
   * address. A gateway gives each sandbox its own socket, so a sandbox cannot
   * claim another's identity by any choice of address. `clientAddress` is the
   * key used with `setClientPolicy` (any address not otherwise in use, such
   * as one from a private IPv6 range).
   */
  async listenForClient(path: string, clientAddress: string): Promise<{ close(): Promise<void> }> {
    const key = canonicalClientAddress(clientAddress)
    if (key === undefined)
      throw new Error(`listenForClient: "${clientAddress}" is not an IP address`)
    const http = this.#httpServer()
    // One client cannot hold every connection the proxy will take.
    const share = this.#options.limits.maxConnectionsPerClient
    let open = 0
    // Half-open on: a client that sends its request and shuts its write
    // side still gets the answer.
    const listener: NetServer = createNetServer({ allowHalfOpen: true }, (socket) => {
      // The HTTP layer reads the client's identity from remoteAddress, which a
      // unix socket does not have; the socket's path stands in for it.
      Object.defineProperty(socket, 'remoteAddress', { value: key, configurable: true })
      if (open >= share) {
        // Answered rather than dropped, so the client can tell a limit from a
        // dead network. The answer goes out without the request being read:
        // what the client sends waits in the socket's bounded buffer until
        // the socket is destroyed.
        this.#refuseUnparsed(socket, 'too-many-connections')
        return
      }
      open++
      socket.once('close', () => {
        open--
      })
      http.emit('connection', socket)
    })
    await new Promise<void>((resolve, reject) => {
      listener.once('error', reject)
      listener.listen(path, () => {
        listener.off('error', reject)
        resolve()
      })
    })
    listener.on('error', () => {})
    this.#unixListeners.add(listener)
    return {
      close: () =>
        new Promise<void>((resolve) => {
          this.#unixListeners.delete(listener)
          listener.close(() => resolve())
        }),
    }
  }

  #httpServer(): Server {
    this.#server ??= this.#createServer()
    return this.#server
  }

  /**
   * Binds and starts serving. A proxy listens once; build another for a
   * second address. `listen(port)` is the reference's form: 127.0.0.1 on that
   * port (0, the default, picks a free one).
   */
  async listen(portOrOptions: number | EgressListenOptions = {}): Promise<RunningEgressProxy> {
    const options: EgressListenOptions =
      typeof portOrOptions === 'number' ? { port: portOrOptions } : portOrOptions
    throwIfAborted(options.signal, 'EgressProxy.listen')
    if (this.#server?.listening)
      throw new Error('EgressProxy.listen: this proxy is already listening')
    const server = this.#httpServer()
    const bindHost = options.host ?? '127.0.0.1'
    await new Promise<void>((resolve, reject) => {
      const onAbort = (): void => {
        server.close()
        reject(new SandboxAbortedError('EgressProxy.listen', { cause: options.signal?.reason }))
      }
      options.signal?.addEventListener('abort', onAbort, { once: true })
      server.once('error', (error) => {
        options.signal?.removeEventListener('abort', onAbort)
        reject(error)
      })
      server.listen({ host: bindHost, port: options.port ?? 0 }, () => {
        options.signal?.removeEventListener('abort', onAbort)
        resolve()
      })
    }).catch((error: unknown) => {
      this.#server = undefined
      throw error
    })
    // Accept errors (EMFILE under descriptor pressure) are emitted on the
    // server; the listener keeps running, so they must not crash the process.
    server.on('error', () => {})
    const address = server.address() as AddressInfo
    this.#self.add({ address: address.address, port: address.port })
    for (const endpoint of this.#options.protectedEndpoints) this.#self.add(endpoint)
    const host = address.address
    const url = `http://${host.includes(':') ? `[${host}]` : host}:${address.port}`
    return {
      host,
      port: address.port,
      url,
      setAllowedHosts: (resolve) => this.setPolicy({ kind: 'resolver', resolve }),
      close: () => this.close(),
    }
  }

  /** Replaces the proxy-wide policy for connections that start afterwards. */
  setPolicy(policy: EgressPolicy): void {
    this.#state.setGlobalPolicy(validatePolicy(policy, 'egress policy'))
  }

  /**
   * Gives the client at `clientAddress` (its source address as the proxy sees
   * it) its own policy, label and optionally its own credentials. Replaces an
   * earlier registration for the same address.
   */
  setClientPolicy(clientAddress: string, client: ClientPolicy): void {
    const parsed = parseConfig(
      clientRegistrationSchema,
      { clientAddress, ...client },
      'egress client registration',
    )
    const broker =
      parsed.brokeredCredentials === undefined
        ? undefined
        : new CredentialBroker(parsed.brokeredCredentials)
    this.#state.setClient(
      canonicalClientAddress(clientAddress)!,
      parsed.clientId,
      parsed.policy as EgressPolicy,
      broker,
    )
  }

  /**
   * Sets the addresses of the machine whose services this proxy must keep out
   * of reach when the proxy itself runs elsewhere (in a container beside it):
   * every one is refused as `address-proxy-self`, like the proxy's own
   * interfaces, whatever the policy. Replaces the previous list; throws
   * `TypeError` on an entry that is not an IP literal.
   */
  setHostAddresses(addresses: readonly string[]): void {
    this.#self.setHostAddresses(addresses)
  }

  /** Forgets a client registration; returns whether there was one. */
  removeClient(clientAddress: string): boolean {
    const address = canonicalClientAddress(clientAddress)
    return address === undefined ? false : this.#state.removeClient(address)
  }

  /** Upstream connections open right now (tunnels and forwarded requests in flight). */
  get activeTunnels(): number {
    return this.#slots.active
  }

  /** Stops the proxy; idempotent, and safe to call before `listen`. */
  close(): Promise<void> {
    this.#closing ??= this.#shutdown()
    return this.#closing
  }

  async #shutdown(): Promise<void> {
    for (const listener of this.#unixListeners) listener.close()
    this.#unixListeners.clear()
    const server = this.#server
    if (server === undefined) return
    const closed = server.listening
      ? new Promise<void>((resolve) => server.close(() => resolve()))
      : Promise.resolve()
    server.closeAllConnections()
    for (const socket of this.#sockets) socket.destroy()
    this.#sockets.clear()
    await closed
  }

  #createServer(): Server {
    const limits = this.#options.limits
    const server = createServer({
      // Absolute-form requests name their host on the request line; Host is
      // checked against it rather than required.
      requireHostHeader: false,
      requestTimeout: 0,
      headersTimeout: Math.min(limits.idleTimeoutMs, 60_000),
      keepAliveTimeout: 5_000,
    })
    server.timeout = limits.idleTimeoutMs
    server.maxConnections = limits.maxClientConnections
    // A client that sends its request and shuts its write side (`printf ... | nc`)
    // still gets the answer: without this, Node's HTTP server aborts the
    // request it is forwarding as soon as the client's end arrives.
    ;(server as Server & { httpAllowHalfOpen: boolean }).httpAllowHalfOpen = true
    const runtime: ProxyRuntime = {
      options: this.#options,
      lookup: this.#options.lookup ?? systemResolver,
      self: this.#self,
      state: this.#state,
      slots: this.#slots,
      emit: this.#emit,
      readBuffers: new TunnelReadBuffers(TUNNEL_READ_BYTES, KEPT_READ_BUFFERS),
      track: (socket) => {
        if (this.#closing !== undefined) {
          socket.destroy()
          return
        }
        this.#sockets.add(socket)
        socket.once('close', () => this.#sockets.delete(socket))
      },
    }
    const forward = (
      request: IncomingMessage,
      response: ServerResponse,
      expectsContinue: boolean,
    ): void => {
      handleRequest(runtime, request, response, expectsContinue).catch(() => {
        if (!response.headersSent) response.writeHead(502, { connection: 'close' })
        response.end()
      })
    }
    server.on('request', (request: IncomingMessage, response: ServerResponse) =>
      forward(request, response, false),
    )
    // Without this listener Node answers `100 Continue` before the policy has
    // been consulted, inviting the body of a request about to be refused.
    server.on('checkContinue', (request: IncomingMessage, response: ServerResponse) =>
      forward(request, response, true),
    )
    server.on('connect', (request: IncomingMessage, socket: Socket, head: Buffer) => {
      handleConnect(runtime, request, socket, head).catch(() => socket.destroy())
    })
    // WebSocket over plain HTTP cannot be screened mid-stream; clients tunnel
    // it with CONNECT instead.
    server.on('upgrade', (_request: IncomingMessage, socket: Socket) => {
      this.#refuseUnparsed(socket, 'bad-request')
    })
    server.on('clientError', (error: NodeJS.ErrnoException, socket: Socket) => {
      const code = error.code ?? ''
      if (!code.startsWith('HPE_')) {
        socket.destroy()
        return
      }
      this.#refuseUnparsed(socket, FRAMING_ERRORS.has(code) ? 'ambiguous-length' : 'bad-request')
    })
    return server
  }

  /** A refusal before the request could be attributed to a host. */
  #refuseUnparsed(socket: Socket, reason: EgressReasonCode): void {
    const startedAt = Date.now()
    const status = refuseOnSocket(socket, reason)
    this.#emit(
      buildDecisionEvent({
        kind: 'http',
        host: '',
        port: 0,
        reason,
        clientAddress: canonicalClientAddress(socket.remoteAddress) ?? '',
        startedAt,
        status,
      }),
    )
  }
}
