import type { Socket } from 'node:net'

/** Longest reply line accepted from the vsock device before giving up on it. */
const MAX_REPLY_BYTES = 64

/** The vsock device refused or did not understand the `CONNECT`: nothing listens on that guest port (yet). */
export class VsockHandshakeError extends Error {
  constructor(message: string) {
    super(message)
    this.name = 'VsockHandshakeError'
  }
}

/**
 * Firecracker's host-initiated vsock connection: on the device's unix socket
 * the client writes `CONNECT <port>\n`; the device answers `OK <host port>\n`
 * once the guest listener on `port` accepted, and from then on the socket is a
 * plain byte stream to the guest. When nothing listens in the guest the device
 * closes the socket without a reply. Bytes that arrive after the reply line
 * are pushed back so the protocol layer sees them.
 */
export function vsockConnect(socket: Socket, port: number): Promise<number> {
  return new Promise((resolve, reject) => {
    let received = Buffer.alloc(0)
    const cleanup = (): void => {
      socket.off('data', onData)
      socket.off('close', onClose)
      socket.off('error', onError)
    }
    const onError = (error: Error): void => {
      cleanup()
      reject(error)
    }
    const onClose = (): void => {
      cleanup()
      reject(
        new VsockHandshakeError(
          `the vsock device closed the connection before answering CONNECT ${port}`,
        ),
      )
    }
    const onData = (chunk: Buffer): void => {
      received = Buffer.concat([received, chunk])
      const newline = received.indexOf(0x0a)
      if (newline === -1) {
        if (received.byteLength > MAX_REPLY_BYTES) {
          cleanup()
          reject(new VsockHandshakeError('the vsock device sent an over-long reply'))
        }
        return
      }
      cleanup()
      const line = received.subarray(0, newline).toString('latin1')
      const rest = received.subarray(newline + 1)
      const match = /^OK (\d+)$/.exec(line)
      if (!match) {
        reject(
          new VsockHandshakeError(
            `the vsock device answered "${line.slice(0, MAX_REPLY_BYTES)}" to CONNECT ${port}`,
          ),
        )
        return
      }
      socket.pause()
      if (rest.byteLength > 0) socket.unshift(rest)
      resolve(Number(match[1]))
    }
    socket.on('data', onData)
    socket.on('close', onClose)
    socket.on('error', onError)
    socket.write(`CONNECT ${port}\n`)
  })
}
