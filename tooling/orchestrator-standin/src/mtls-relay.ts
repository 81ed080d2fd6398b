import { connect, type Socket } from 'node:net'
import { createServer, type Server } from 'node:tls'

export interface MtlsRelayCredentials {
  /** The relay's own certificate and key (PEM). */
  readonly cert: string
  readonly key: string
  /** CA that client certificates must chain to (PEM). */
  readonly ca: string
}

/**
 * A TLS listener in front of one guest's agent that accepts only clients with
 * a certificate from `ca`, then splices the stream to the agent socket: the
 * shape a real orchestrator uses when the host running cordon is not the
 * machine running the guests.
 */
export async function startMtlsRelay(options: {
  readonly host: string
  readonly credentials: MtlsRelayCredentials
  /** One guest behind this relay... */
  readonly agentSocketPath?: string
  /**
   * ...or a per-host relay: the client's first line, `SANDBOX <id>`, names
   * the guest, and this maps it to that guest's agent socket (undefined
   * closes the connection).
   */
  readonly route?: (sandboxId: string) => string | undefined
}): Promise<{ readonly port: number; close(): Promise<void> }> {
  const open = new Set<Socket>()
  const server: Server = createServer(
    {
      cert: options.credentials.cert,
      key: options.credentials.key,
      ca: options.credentials.ca,
      requestCert: true,
      rejectUnauthorized: true,
    },
    async (client) => {
      open.add(client)
      client.on('close', () => open.delete(client))
      client.on('error', () => {})
      let socketPath = options.agentSocketPath
      if (options.route) {
        const line = await readRoutingLine(client)
        const match = line === undefined ? null : /^SANDBOX (\S+)$/.exec(line)
        socketPath = match ? options.route(match[1]!) : undefined
      }
      if (socketPath === undefined) {
        client.destroy()
        return
      }
      client.pause()
      const guest = connect(socketPath)
      open.add(guest)
      guest.on('close', () => {
        open.delete(guest)
        // Ended cleanly: the pipe ends the client once the queued bytes are written (see vsock-relay.ts).
        if (!guest.readableEnded) client.destroy()
      })
      guest.on('error', () => client.destroy())
      guest.once('connect', () => {
        client.pipe(guest)
        guest.pipe(client)
        client.resume()
        client.on('close', () => guest.destroy())
      })
    },
  )
  server.on('tlsClientError', () => {})
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject)
    server.listen(0, options.host, () => {
      server.off('error', reject)
      resolve()
    })
  })
  const address = server.address()
  const port = typeof address === 'object' && address ? address.port : 0
  return {
    port,
    async close() {
      for (const socket of open) socket.destroy()
      await new Promise<void>((resolve) => server.close(() => resolve()))
    },
  }
}

/** Reads the first line (at most 256 bytes) and puts back whatever followed it. */
function readRoutingLine(client: Socket): Promise<string | undefined> {
  return new Promise((resolve) => {
    let buffered = Buffer.alloc(0)
    const onData = (chunk: Buffer): void => {
      buffered = Buffer.concat([buffered, chunk])
      const end = buffered.indexOf(10)
      if (end === -1 && buffered.length <= 256) return
      client.off('data', onData)
      client.pause()
      if (end === -1) {
        resolve(undefined)
        return
      }
      const rest = buffered.subarray(end + 1)
      if (rest.length > 0) client.unshift(rest)
      resolve(buffered.subarray(0, end).toString('utf8'))
    }
    client.on('data', onData)
    client.once('close', () => resolve(undefined))
  })
}
