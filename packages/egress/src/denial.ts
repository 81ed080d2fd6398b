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
 * at its tunnel limit (retrying later may work, nothing else will).
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
export function refuseOnSocket(socket: Socket, reason: EgressReasonCode): number {
  const status = statusForReason(reason)
  const body = denialBody(reason)
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

export function denialBody(reason: EgressReasonCode): string {
  return `egress denied: ${reason}\n`
}
