import { connect, Socket } from 'node:net'
import { type MuxStream, pipeBothWays, StreamMux } from './protocol/stream-mux.js'

/**
 * `agent --relay <socket>`: the way back to a detached sandbox's agent where
 * the host cannot reach the agent's direct socket itself (gVisor keeps it
 * inside its own kernel; a remote engine's filesystem is not the host's).
 * The host starts it with the engine's exec, as root, inside the sandbox,
 * and speaks the stream multiplexer over its stdin and stdout, as over an
 * attached agent. Each `agent` or `file` stream becomes one connection to
 * the agent's socket (root's, in a root-only directory: the sandbox's user
 * cannot reach it, and the relay cannot either without being started as
 * root); each `connect` stream, a connection to that port on the sandbox's
 * loopback. The relay holds no secret and adds no authority: the agent
 * authenticates every connection it passes as any other. It ends when its
 * stdin does (the host dropped the exec, or died).
 */
export function runRelay(socketPath: string): void {
  const output = new Socket({ fd: 1, readable: false, writable: true })
  const mux = new StreamMux(process.stdin, output, {
    initiator: false,
    onStream: (stream: MuxStream, opening) => {
      stream.on('error', () => {})
      if (opening.kind === 'agent' || opening.kind === 'file') {
        pipeTo(stream, connect({ path: socketPath, allowHalfOpen: true }))
      } else if (opening.kind === 'connect') {
        const port = opening.port
        if (typeof port !== 'number' || !Number.isInteger(port) || port < 1 || port > 65535) {
          stream.destroy()
          return
        }
        pipeTo(stream, connect({ port, host: '127.0.0.1', allowHalfOpen: true }))
      } else {
        stream.destroy()
      }
    },
  })
  mux.onClose(() => process.exit(0))
}

function pipeTo(stream: MuxStream, socket: Socket): void {
  socket.on('error', () => stream.destroy())
  pipeBothWays(socket, stream)
}
