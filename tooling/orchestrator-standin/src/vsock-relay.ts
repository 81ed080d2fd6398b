import { unlink } from 'node:fs/promises'
import { connect, createServer, type Server, type Socket } from 'node:net'

/** Longest `CONNECT` line accepted; Firecracker's device is as strict. */
const MAX_REQUEST_BYTES = 32

/**
 * Emulates the host side of a Firecracker vsock device: a unix socket where a
 * client writes `CONNECT <port>\n`, and, if something listens on that guest
 * port, reads `OK <host port>\n` and then talks to the guest listener. When
 * nothing listens (the agent is not up yet, or another port was asked for)
 * the connection is closed without a reply, as Firecracker does.
 *
 * Here the "guest listener" for `agentPort` is the agent's unix socket in the
 * guest's bind-mounted run directory.
 */
export async function startVsockRelay(options: {
  readonly udsPath: string
  readonly agentPort: number
  readonly agentSocketPath: string
}): Promise<{ close(): Promise<void> }> {
  let nextHostPort = 1_073_741_824
  const open = new Set<Socket>()
  const server: Server = createServer((client) => {
    open.add(client)
    client.on('close', () => open.delete(client))
    client.on('error', () => {})
    let buffered = Buffer.alloc(0)
    const onData = (chunk: Buffer): void => {
      buffered = Buffer.concat([buffered, chunk])
      const newline = buffered.indexOf(0x0a)
      if (newline === -1) {
        if (buffered.byteLength > MAX_REQUEST_BYTES) client.destroy()
        return
      }
      client.off('data', onData)
      client.pause()
      const line = buffered.subarray(0, newline).toString('latin1')
      const rest = buffered.subarray(newline + 1)
      const match = /^CONNECT (\d+)$/.exec(line)
      if (!match || Number(match[1]) !== options.agentPort) {
        client.destroy()
        return
      }
      const guest = connect(options.agentSocketPath)
      open.add(guest)
      guest.on('close', () => open.delete(guest))
      guest.once('error', () => {
        client.destroy()
        guest.destroy()
      })
      guest.once('connect', () => {
        nextHostPort++
        client.write(`OK ${nextHostPort}\n`)
        if (rest.byteLength > 0) guest.write(rest)
        client.pipe(guest)
        guest.pipe(client)
        client.resume()
        client.on('close', () => guest.destroy())
        // A guest that ended cleanly has its last bytes queued toward the
        // client: the pipe ends the client once they are written. Destroying
        // it here cut a large answer short (the host saw the stream end
        // inside a frame). Only a guest that went away without ending does.
        guest.on('close', () => {
          if (!guest.readableEnded) client.destroy()
        })
      })
    }
    client.on('data', onData)
  })
  await unlink(options.udsPath).catch(() => {})
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject)
    server.listen(options.udsPath, () => {
      server.off('error', reject)
      resolve()
    })
  })
  return {
    async close() {
      for (const socket of open) socket.destroy()
      await new Promise<void>((resolve) => server.close(() => resolve()))
      await unlink(options.udsPath).catch(() => {})
    },
  }
}
