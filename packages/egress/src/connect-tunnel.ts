/**
 * CONNECT tunnels. Every check (authority, Host, client, policy, port, every
 * resolved address) runs before the client is told `200`, and no byte the
 * client sent is relayed until the upstream leg to a screened address is
 * open. What flows through the tunnel afterwards is opaque to the proxy.
 */
import type { IncomingMessage } from 'node:http'
import type { Socket } from 'node:net'
import type { EgressReasonCode } from '@cordon/core'
import { admit } from './admission.js'
import {
  checkHostHeaders,
  normalizeTargetHost,
  parseAuthority,
  policySubject,
} from './authority.js'
import { refuseOnSocket } from './denial.js'
import { exchangeClient } from './exchange-client.js'
import { DialError, type DialedSocket, dialPinned } from './pinned-dial.js'
import type { ProxyRuntime } from './proxy-runtime.js'

export async function handleConnect(
  runtime: ProxyRuntime,
  request: IncomingMessage,
  client: Socket,
  head: Buffer,
): Promise<void> {
  client.on('error', () => {})
  runtime.track(client)
  const exchange = exchangeClient(runtime, 'connect', client.remoteAddress)
  const { clientAddress, found } = exchange
  let host = ''
  let port = 0
  const deny = (reason: EgressReasonCode, address?: string): void => {
    exchange.report({
      host,
      port,
      reason,
      address,
      status: refuseOnSocket(client, reason, { host, port }),
    })
  }

  const authority = parseAuthority(request.url ?? '')
  if (authority === undefined || authority.port === undefined) return deny('bad-request')
  host = authority.host
  port = authority.port
  const target = normalizeTargetHost(authority.host)
  if (target === undefined) return deny('bad-request')
  host = policySubject(target)
  const hostCheck = checkHostHeaders(request.rawHeaders, target, port, port)
  if (hostCheck !== 'ok') return deny(hostCheck)
  // A CONNECT carries no body; framing headers on one are a smuggling attempt.
  const length = request.headers['content-length']
  if (
    request.headers['transfer-encoding'] !== undefined ||
    (length !== undefined && length !== '0')
  ) {
    return deny('ambiguous-length')
  }

  if (!found.ok) return deny(found.reason)

  const release = runtime.slots.acquire(clientAddress)
  if (release === undefined) return deny('too-many-tunnels')

  const admission = await admit(runtime, found.client, target, port)
  if (!admission.ok) {
    release()
    return deny(admission.reason, admission.address)
  }

  // Upstream-to-client bytes, the bulk of most tunnels, are read into one
  // buffer per tunnel and written to the client before the next read starts
  // (the buffer is reused, so it must be flushed first): no allocation per
  // read and no stream machinery in between, about 15% more throughput than
  // `pipe` on loopback. Client-to-upstream bytes still go through `pipe`.
  let relayDown: ((bytes: number, buffer: Uint8Array) => boolean) | undefined
  // Bytes read before the tunnel is set up (not expected: it is set up in the
  // same turn of the event loop as the connect) are copied and sent first.
  const early: Buffer[] = []
  let dialled: DialedSocket
  const readBuffer = runtime.readBuffers.take()
  try {
    dialled = await dialPinned(admission.addresses, port, runtime.options.limits.connectTimeoutMs, {
      buffer: readBuffer,
      callback: (bytes, buffer) => {
        if (relayDown) return relayDown(bytes, buffer)
        early.push(Buffer.from(buffer.subarray(0, bytes)))
        return true
      },
    })
  } catch (error) {
    release()
    const timedOut = error instanceof DialError && error.timedOut
    return deny(timedOut ? 'connect-timeout' : 'connect-failed')
  }
  const upstream = dialled.socket
  upstream.on('error', () => {})
  runtime.track(upstream)
  const address = dialled.address

  let failure: string | undefined
  const report = (): void => {
    release()
    exchange.report({
      host,
      port,
      reason: 'allowed',
      address,
      bytesUp: upstream.bytesWritten,
      bytesDown: upstream.bytesRead,
      status: 200,
      error: failure,
    })
  }

  if (client.destroyed) {
    failure = 'client closed before the tunnel opened'
    upstream.destroy()
    report()
    return
  }

  let closed = 0
  const finish = (): void => {
    closed += 1
    if (closed !== 2) return
    // Both sockets closed: nothing reads into the buffer or writes from it.
    runtime.readBuffers.giveBack(readBuffer)
    report()
  }
  upstream.once('close', finish)
  client.once('close', finish)

  const idle = runtime.options.limits.idleTimeoutMs
  const onIdle = (): void => {
    failure ??= 'idle timeout'
    client.destroy()
    upstream.destroy()
  }
  client.setTimeout(idle, onIdle)
  upstream.setTimeout(idle, onIdle)
  // One side closing ends the other gracefully, so data already queued still
  // drains; a side that then never closes is caught by the idle timeout.
  // `end()` on a side already ended is skipped: Node answers it by building
  // an ERR_STREAM_ALREADY_FINISHED error, stack trace included, which was
  // the most expensive JavaScript of a tunnel's teardown.
  client.once('close', () => endUnlessEnded(upstream))
  upstream.once('close', () => endUnlessEnded(client))
  client.once('error', (error: Error) => {
    failure ??= `client: ${error.message}`
    upstream.destroy()
  })
  upstream.once('error', (error: Error) => {
    failure ??= `upstream: ${error.message}`
    client.destroy()
  })

  relayDown = (bytes, buffer) => {
    if (client.destroyed) return false
    client.write(buffer.subarray(0, bytes), () => {
      if (!upstream.destroyed) upstream.resume()
    })
    // Stop reading until the client has the bytes; the callback resumes.
    return false
  }
  client.write('HTTP/1.1 200 Connection Established\r\n\r\n')
  for (const bytes of early.splice(0)) client.write(bytes)
  if (head.length > 0) upstream.write(head)
  client.pipe(upstream)
  // An upstream that ends its side (EOF) ends the client's once it drains.
  upstream.once('end', () => endUnlessEnded(client))
  upstream.resume()
}

function endUnlessEnded(socket: Socket): void {
  if (!socket.destroyed && !socket.writableEnded) socket.end()
}
