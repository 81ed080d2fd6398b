/**
 * How a refusal is answered. Every refusal gets a complete response and the
 * connection is closed after it, so a denied client never waits on a socket
 * the proxy has stopped caring about.
 */
import type { Socket } from 'node:net'
import type { EgressReasonCode } from '@cordon/core'

/** Response header that carries the reason code of a refusal. */
export const EGRESS_DENIED_HEADER = 'x-cordon-egress-denied'

/**
 * 403 for everything the proxy refused on policy or screening grounds; 502 and
 * 504 when an allowed destination could not be reached; 503 when the proxy is
 * at its tunnel limit or a client at its connection limit (retrying later may
 * work, nothing else will).
 */
export function statusForReason(reason: EgressReasonCode): number {
  switch (reason) {
    case 'allowed':
      return 200
    case 'connect-failed':
      return 502
    case 'connect-timeout':
      return 504
    case 'too-many-tunnels':
    case 'too-many-connections':
      return 503
    default:
      return 403
  }
}

const STATUS_TEXT: Readonly<Record<number, string>> = {
  400: 'Bad Request',
  403: 'Forbidden',
  502: 'Bad Gateway',
  503: 'Service Unavailable',
  504: 'Gateway Timeout',
}

/** How long a refused socket may take to drain the answer before it is destroyed. */
const DRAIN_GRACE_MS = 2_000

/** Writes a refusal on a raw socket (CONNECT, or a request the parser rejected). */
export function refuseOnSocket(
  socket: Socket,
  reason: EgressReasonCode,
  destination?: RefusedDestination,
): number {
  const status = statusForReason(reason)
  const body = denialBody(reason, destination)
  if (!socket.destroyed && socket.writable) {
    socket.end(
      `HTTP/1.1 ${status} ${STATUS_TEXT[status] ?? 'Error'}\r\n` +
        `${EGRESS_DENIED_HEADER}: ${reason}\r\n` +
        'content-type: text/plain; charset=utf-8\r\n' +
        `content-length: ${Buffer.byteLength(body)}\r\n` +
        'connection: close\r\n\r\n' +
        body,
    )
  }
  setTimeout(() => socket.destroy(), DRAIN_GRACE_MS).unref()
  return status
}

/** Where a refused request was going, as far as the proxy learnt it. */
export interface RefusedDestination {
  readonly host: string
  readonly port: number
}

/**
 * The refusal's body, which names the refused destination: an agent in the
 * sandbox reads it to tell "this host is not permitted" from "the network is
 * down". A request refused before its destination was known gets the reason
 * alone.
 */
export function denialBody(reason: EgressReasonCode, destination?: RefusedDestination): string {
  const host = destination ? printable(destination.host) : ''
  if (!host) return `egress denied: ${reason}\n`
  const at = host.includes(':') ? `[${host}]` : host
  return `egress denied for ${destination!.port > 0 ? `${at}:${destination!.port}` : at}: ${reason}\n`
}

/** The host as sent, with anything but printable ASCII replaced: it goes back to whoever sent it. */
function printable(host: string): string {
  return host.replace(/[^\x21-\x7e]/g, '?')
}
