import { type Server, Socket, type SocketConstructorOpts } from 'node:net'

/** What one read of a host-backed connection asks for at most. */
export const LARGE_READ_BYTES = 1024 * 1024

/** Node's own fields of an accepted socket that the hand-over below touches. */
interface AcceptedInternals {
  _handle?: object | null
  _server?: Server | null
}

/**
 * The connection `accepted` (from a server made with `pauseOnConnect`, so
 * not yet reading) wrapped anew around its handle, reading up to
 * {@link LARGE_READ_BYTES} a system call instead of the 64 KiB Node reads a
 * stream in. For the host-backed socket under gVisor, where every system
 * call is a round trip through its kernel: a Node program there received
 * 100 MiB from the host in 300-437 ms through 1,619 reads as a stream, and
 * in 108-194 ms through about 520 reads so (bench/misses.md, issue 30).
 *
 * Node reads into a buffer of one's own only for a socket made with its
 * `onread` option, and hands each read to a callback that must be done with
 * the buffer when it returns. The callback pushes a copy into the socket's
 * readable side, as Node itself does with what it reads, so whoever reads
 * the socket (the framing, or the session multiplexer that can take a
 * connection over, after bytes put back with `unshift`) reads it as any
 * other, paused and flowing alike; a full readable side stops the handle's
 * reads until it is read from, as for any socket. A
 * server's accepted socket gets `onread` only by a socket made around its
 * handle (the `handle` option, which Node's own server uses for every
 * connection), which then counts in the server's connections in its place.
 * Where Node does not allow it, `accepted` is returned, reading as a stream.
 * Each connection keeps its buffer: 1 MiB of address space, resident as far
 * as reads have filled it (a read gave about 200 KiB under gVisor); the
 * host holds a few connections at a time, and only the host can connect.
 */
export function withLargeReads(accepted: Socket, server: Server): Socket {
  const internals = accepted as unknown as AcceptedInternals
  const handle = internals._handle
  if (!handle) return resumed(accepted)
  const buffer = Buffer.allocUnsafe(LARGE_READ_BYTES)
  let socket: Socket
  try {
    socket = new Socket({
      handle,
      allowHalfOpen: accepted.allowHalfOpen,
      onread: {
        buffer,
        // A copy: Node reads into the buffer again as soon as this returns.
        // False (the readable side is full) stops the handle's reads.
        callback: (bytes: number) => socket.push(Buffer.from(buffer.subarray(0, bytes))),
      },
    } as SocketConstructorOpts)
  } catch {
    return resumed(accepted)
  }
  // The handle is the new socket's: the accepted one must never close it.
  internals._handle = null
  ;(socket as unknown as AcceptedInternals)._server = server
  return socket
}

function resumed(socket: Socket): Socket {
  socket.resume()
  return socket
}
