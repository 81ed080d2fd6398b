import { once } from 'node:events'
import { type AddressInfo, createServer, type Server, type Socket } from 'node:net'
import type { Duplex } from 'node:stream'
import {
  SandboxConfigValidationError,
  type SandboxPortForward,
  type SandboxPortForwardOptions,
} from '@cordon/core'
import { throwIfAborted } from '@cordon/core/backend'
import { pipeBothWays } from '../protocol/stream-mux.js'

/** Opens a byte stream to a TCP port on the sandbox's loopback, over the backend's channel. */
export type SandboxPortDialer = (port: number) => Duplex

function validPort(value: unknown): value is number {
  return typeof value === 'number' && Number.isInteger(value) && value >= 1 && value <= 65535
}

/**
 * Listens on the host and joins every accepted connection to a fresh stream
 * to the sandbox's port. Half-close passes through both ways (an HTTP client
 * that shuts its write side still gets its answer); a connection the sandbox
 * refuses is reset on the host side.
 */
export async function forwardPort(
  dial: SandboxPortDialer,
  sandboxPort: number,
  options: SandboxPortForwardOptions = {},
  onClose: (forward: SandboxPortForward) => void = () => {},
): Promise<SandboxPortForward> {
  const issues = [
    ...(validPort(sandboxPort)
      ? []
      : [{ path: 'port', message: 'must be an integer from 1 to 65535' }]),
    ...(options.hostPort === undefined || options.hostPort === 0 || validPort(options.hostPort)
      ? []
      : [{ path: 'hostPort', message: 'must be an integer from 0 to 65535' }]),
  ]
  if (issues.length > 0) throw new SandboxConfigValidationError('forwardPort request', issues)
  throwIfAborted(options.signal, 'forwardPort')
  const connections = new Set<Socket>()
  const server: Server = createServer({ allowHalfOpen: true }, (socket) => {
    connections.add(socket)
    socket.once('close', () => connections.delete(socket))
    socket.on('error', () => {})
    let stream: Duplex
    try {
      stream = dial(sandboxPort)
    } catch {
      socket.destroy()
      return
    }
    stream.on('error', () => {})
    pipeBothWays(socket, stream)
  })
  const host = options.hostAddress ?? '127.0.0.1'
  server.listen(options.hostPort ?? 0, host)
  await Promise.race([
    once(server, 'listening'),
    once(server, 'error').then(([error]) => {
      throw error
    }),
  ])
  const { port } = server.address() as AddressInfo
  let closing: Promise<void> | undefined
  const forward: SandboxPortForward = {
    sandboxPort,
    host,
    port,
    url: `http://${host.includes(':') ? `[${host}]` : host}:${port}`,
    get activeConnections() {
      return connections.size
    },
    close() {
      closing ??= new Promise<void>((resolve) => {
        for (const socket of connections) socket.destroy()
        server.close(() => resolve())
        onClose(forward)
      })
      return closing
    },
    [Symbol.asyncDispose]() {
      return forward.close()
    },
  }
  return forward
}
