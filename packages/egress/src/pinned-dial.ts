/**
 * Connecting to the addresses that were screened, and to nothing else.
 *
 * Both the tunnel dialler and the upstream HTTP connector take the list
 * `resolveAndScreen` produced and try it in order within one connect budget.
 * Neither is ever given a host name to resolve, so no second lookup can
 * return a different (unscreened) address.
 */
import { connect as netConnect, type OnReadOpts, type Socket } from 'node:net'
import { rootCertificates } from 'node:tls'
import { buildConnector } from 'undici'
import type { IpLiteral } from './ip-literal.js'

export class DialError extends Error {
  readonly timedOut: boolean
  constructor(message: string, timedOut: boolean, options?: { cause?: unknown }) {
    super(message, options)
    this.name = 'DialError'
    this.timedOut = timedOut
  }
}

export interface DialedSocket {
  readonly socket: Socket
  /**
   * The screened address the socket is connected to, as the caller gave it:
   * no `getpeername` call needed to report it.
   */
  readonly address: string
}

/**
 * Opens a TCP connection to the first of `addresses` that answers within
 * `timeoutMs` overall. `onread` (Node's `net.connect` option) makes the
 * socket read into the caller's buffer instead of emitting `data`.
 */
export function dialPinned(
  addresses: readonly IpLiteral[],
  port: number,
  timeoutMs: number,
  onread?: OnReadOpts,
): Promise<DialedSocket> {
  const deadline = Date.now() + timeoutMs
  return new Promise<DialedSocket>((resolve, reject) => {
    let index = 0
    let lastError: unknown
    const attempt = (): void => {
      const ip = addresses[index]
      const remaining = deadline - Date.now()
      if (ip === undefined || remaining <= 0) {
        reject(
          remaining <= 0
            ? new DialError('connect timed out', true, { cause: lastError })
            : new DialError('connect failed', false, { cause: lastError }),
        )
        return
      }
      const socket = netConnect({
        host: ip.address,
        port,
        family: ip.family,
        autoSelectFamily: false,
        ...(onread ? { onread } : {}),
      })
      const timer = setTimeout(() => {
        socket.destroy()
        lastError = new Error(`connect to ${ip.address}:${port} timed out`)
        index = addresses.length
        attempt()
      }, remaining)
      const onError = (error: Error): void => {
        clearTimeout(timer)
        socket.destroy()
        lastError = error
        index += 1
        attempt()
      }
      socket.once('error', onError)
      socket.once('connect', () => {
        clearTimeout(timer)
        socket.off('error', onError)
        resolve({ socket, address: ip.address })
      })
    }
    attempt()
  })
}

export interface UpstreamTlsOptions {
  /** Extra trusted CA certificates (PEM), added to Node's bundled roots. */
  readonly ca?: string | readonly string[]
}

type Connector = ReturnType<typeof buildConnector>

/**
 * An undici `connect` function that ignores the host name undici would dial
 * and connects to the screened addresses instead. TLS still verifies the
 * certificate against the host name (`servername`), so pinning the address
 * never weakens server authentication.
 */
export function pinnedConnector(options: {
  readonly addresses: readonly IpLiteral[]
  /** SNI and certificate name; `undefined` for an IP-literal target. */
  readonly servername: string | undefined
  readonly timeoutMs: number
  readonly tls: UpstreamTlsOptions | undefined
  /** Told which address the connection went to. */
  readonly onConnected?: (address: string) => void
}): Connector {
  const extraCa = options.tls?.ca === undefined ? [] : [options.tls.ca].flat()
  const ca = extraCa.length > 0 ? [...rootCertificates, ...extraCa] : undefined
  return (connectOptions, callback) => {
    const deadline = Date.now() + options.timeoutMs
    let index = 0
    const attempt = (): void => {
      const ip = options.addresses[index]
      const remaining = deadline - Date.now()
      if (ip === undefined || remaining <= 0) {
        callback(
          new DialError(remaining <= 0 ? 'connect timed out' : 'connect failed', remaining <= 0),
          null,
        )
        return
      }
      const connector = buildConnector({
        timeout: remaining,
        rejectUnauthorized: true,
        ...(ca === undefined ? {} : { ca }),
        ...(options.servername === undefined ? {} : { servername: options.servername }),
      })
      connector(
        {
          ...connectOptions,
          hostname: ip.address,
          ...(options.servername === undefined ? {} : { servername: options.servername }),
        },
        (error, socket) => {
          if (error === null && socket !== null) {
            options.onConnected?.(ip.address)
            callback(null, socket)
            return
          }
          const code = (error as { code?: string } | null)?.code
          if (code === 'UND_ERR_CONNECT_TIMEOUT' || Date.now() >= deadline) {
            callback(new DialError('connect timed out', true, { cause: error }), null)
            return
          }
          // A TLS failure is the server's answer, not a dead address: do not
          // shop around the other addresses for a certificate that passes.
          if (isTlsFailure(error)) {
            callback(error, null)
            return
          }
          index += 1
          attempt()
        },
      )
    }
    attempt()
  }
}

function isTlsFailure(error: unknown): boolean {
  const code = (error as { code?: unknown } | null)?.code
  return (
    typeof code === 'string' && (code.startsWith('ERR_TLS') || /CERT|SSL|SELF_SIGNED/.test(code))
  )
}
