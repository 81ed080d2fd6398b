import { once } from 'node:events'
import { chmod, rm } from 'node:fs/promises'
import { type AddressInfo, createServer, type Server, type Socket } from 'node:net'
import { join } from 'node:path'
import type { Duplex } from 'node:stream'
import type {
  SandboxForward,
  SandboxForwardOptions,
  SandboxPortForward,
  SandboxUnixSocketForward,
} from '@cordon/core'
import {
  makeForwardDirectory,
  sweepForwardDirectories,
  throwIfAborted,
  validatePortForwardRequest,
} from '@cordon/core/backend'
import { pipeBothWays } from '../protocol/stream-mux.js'

/** Opens a byte stream to a TCP port on the sandbox's loopback, over the backend's channel. */
export type SandboxPortDialer = (port: number) => Duplex

/**
 * A server that joins every accepted connection to a fresh stream to the
 * sandbox's port. Half-close passes through both ways (an HTTP client that
 * shuts its write side still gets its answer); a connection the sandbox
 * refuses is reset on the host side.
 */
function carryingServer(
  dial: SandboxPortDialer,
  sandboxPort: number,
): { server: Server; connections: Set<Socket> } {
  const connections = new Set<Socket>()
  const server = createServer({ allowHalfOpen: true }, (socket) => {
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
  return { server, connections }
}

async function listening(server: Server, listen: () => void): Promise<void> {
  listen()
  await Promise.race([
    once(server, 'listening'),
    once(server, 'error').then(([error]) => {
      throw error
    }),
  ])
}

/** Stops listening and ends every carried connection; `cleanUp` runs once the server is closed. */
function closer(
  server: Server,
  connections: Set<Socket>,
  cleanUp: () => Promise<void>,
  onClosing: () => void,
): () => Promise<void> {
  let closing: Promise<void> | undefined
  return () => {
    closing ??= new Promise<void>((resolve) => {
      for (const socket of connections) socket.destroy()
      server.close(() => resolve())
      onClosing()
    }).then(cleanUp)
    return closing
  }
}

/**
 * Listens on the host and carries every connection to `sandboxPort` on the
 * sandbox's loopback: on a TCP port (the loopback unless the host opted out
 * with `exposeBeyondLoopback`), or on a unix socket only this user can
 * open. Every problem with the request is refused before anything listens.
 */
export async function forwardPort(
  dial: SandboxPortDialer,
  sandboxPort: number,
  options: SandboxForwardOptions = {},
  onClose: (forward: SandboxForward) => void = () => {},
): Promise<SandboxForward> {
  const listener = validatePortForwardRequest(sandboxPort, options)
  throwIfAborted(options.signal, 'forwardPort')
  const { server, connections } = carryingServer(dial, sandboxPort)

  if (listener.kind === 'unix') {
    // What killed hosts of this user left goes first; a failure to sweep does not stop this forward.
    await sweepForwardDirectories().catch(() => {})
    // The directory is 0700 (in a parent that is too), so until the socket's own
    // chmod below nobody but this user (and root) can reach the socket at all.
    const directory = await makeForwardDirectory()
    const socketPath = join(directory, `port-${sandboxPort}.sock`)
    try {
      throwIfAborted(options.signal, 'forwardPort')
      await listening(server, () => server.listen(socketPath))
      await chmod(socketPath, 0o600)
    } catch (error) {
      server.close()
      await rm(directory, { recursive: true, force: true })
      throw error
    }
    const close = closer(
      server,
      connections,
      () => rm(directory, { recursive: true, force: true }),
      () => onClose(forward),
    )
    const forward: SandboxUnixSocketForward = {
      sandboxPort,
      socketPath,
      get activeConnections() {
        return connections.size
      },
      close,
      // Through the property, so a wrapper's replacement of close() is honoured.
      [Symbol.asyncDispose]() {
        return forward.close()
      },
    }
    return forward
  }

  const host = listener.hostAddress
  await listening(server, () => server.listen(listener.hostPort, host))
  const { port } = server.address() as AddressInfo
  const close = closer(
    server,
    connections,
    async () => {},
    () => onClose(forward),
  )
  const forward: SandboxPortForward = {
    sandboxPort,
    host,
    port,
    url: `http://${host.includes(':') ? `[${host}]` : host}:${port}`,
    get activeConnections() {
      return connections.size
    },
    close,
    [Symbol.asyncDispose]() {
      return forward.close()
    },
  }
  return forward
}
