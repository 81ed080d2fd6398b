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
  readonly agentSocketPath: string
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
    (client) => {
      open.add(client)
      client.on('close', () => open.delete(client))
      client.on('error', () => {})
      client.pause()
      const guest = connect(options.agentSocketPath)
      open.add(guest)
      guest.on('close', () => {
        open.delete(guest)
        client.destroy()
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
