/**
 * The egress bench's upstream, run as its own process so it never shares an
 * event loop with the proxy or the client under test. Protocol: the client
 * sends one line with a byte count; the server sends that many bytes and
 * closes. Prints `{"port":N}` once listening on 127.0.0.1.
 */
import { createServer, type Socket } from 'node:net'

const block = Buffer.alloc(1024 * 1024, 0x61)

function serve(socket: Socket): void {
  socket.setNoDelay(true)
  socket.on('error', () => socket.destroy())
  let line = ''
  const onData = (chunk: Buffer) => {
    line += chunk.toString('latin1')
    const newline = line.indexOf('\n')
    if (newline === -1) return
    socket.off('data', onData)
    let remaining = Number(line.slice(0, newline))
    const pump = () => {
      while (remaining > 0) {
        const size = Math.min(remaining, block.length)
        remaining -= size
        if (!socket.write(size === block.length ? block : block.subarray(0, size))) {
          socket.once('drain', pump)
          return
        }
      }
      socket.end()
    }
    pump()
  }
  socket.on('data', onData)
}

const server = createServer(serve)
server.listen({ host: '127.0.0.1', port: 0 }, () => {
  const address = server.address()
  process.stdout.write(
    `${JSON.stringify({ port: typeof address === 'object' && address ? address.port : 0 })}\n`,
  )
})
process.on('SIGTERM', () => process.exit(0))
