import { connect as netConnect, type Socket } from 'node:net'
import { type AgentDial, RetryableDialError } from './agent-client.js'

export interface SocketConnectOptions {
  /** The event that means connected: `connect`, or `secureConnect` for a TLS socket (default `connect`). */
  readonly event?: 'connect' | 'secureConnect'
  /** What a socket error becomes (default: a {@link RetryableDialError}). */
  readonly classify?: (error: NodeJS.ErrnoException) => Error
}

/**
 * Resolves with `socket` once it is connected; a socket error before that
 * rejects (as `classify` says), and `signal` firing destroys the socket. The
 * building block of a backend's {@link AgentDial}.
 */
export function socketConnected<S extends Socket>(
  socket: S,
  signal: AbortSignal,
  options: SocketConnectOptions = {},
): Promise<S> {
  const classify =
    options.classify ??
    ((error: Error): Error => new RetryableDialError(error.message, { cause: error }))
  return new Promise<S>((resolve, reject) => {
    let settled = false
    const finish = (error: Error | undefined): void => {
      if (settled) return
      settled = true
      signal.removeEventListener('abort', onAbort)
      if (error) {
        socket.destroy()
        reject(error)
      } else resolve(socket)
    }
    const onAbort = (): void =>
      finish(new RetryableDialError('the dial was abandoned', { cause: signal.reason }))
    if (signal.aborted) {
      onAbort()
      return
    }
    signal.addEventListener('abort', onAbort, { once: true })
    // Stays attached once connected, so an error before the protocol layer listens is not unhandled.
    socket.once('error', (error: NodeJS.ErrnoException) => finish(classify(error)))
    socket.once(options.event ?? 'connect', () => finish(undefined))
  })
}

/** Dials the agent at `host:port` over plain TCP (an agent started with `CORDON_AGENT_LISTEN=tcp:…`). */
export function dialTcp(host: string, port: number): AgentDial {
  return (signal) => socketConnected(netConnect({ host, port, noDelay: true }), signal)
}

/**
 * Dials the agent on a unix socket at `path` (an agent started with
 * `CORDON_AGENT_LISTEN=unix:…`, or a socket a runtime exposes for it, such
 * as a Firecracker guest's vsock proxy). A missing or refusing socket is a
 * {@link RetryableDialError}: the agent may still be starting.
 */
export function dialUnix(path: string): AgentDial {
  return (signal) => socketConnected(netConnect({ path }), signal)
}
