#!/usr/bin/env node
/**
 * `cordon-egress-gateway`: the egress proxy as the gateway of a provider's
 * sandboxes. Its only channel is its stdin and stdout, carrying the agent's
 * stream multiplexer, so the host needs no network path to it and a sandbox
 * has none:
 *
 * - one `control` stream: commands as JSON lines (see gateway-commands.ts),
 *   answered by acknowledgements, plus one `{"type":"egress",…}` decision
 *   event per request or tunnel;
 * - one `client` stream per sandbox connection, `{ clientId }` naming the
 *   sandbox. The host opens it for a connection that sandbox made, so a
 *   connection's client is known from which stream it came on, never from
 *   anything the sandbox sends. Inside, each client has a unix socket of its
 *   own in a private directory, and its streams are joined to that socket.
 *
 * Diagnostics go to stderr. The process ends when its channel closes, so a
 * gateway whose host is gone does not linger.
 */
import { mkdir, rm } from 'node:fs/promises'
import { connect, Socket } from 'node:net'
import { createInterface } from 'node:readline'
import { type MuxStream, pipeBothWays, StreamMux } from '@cordon/agent/protocol'
import type { BrokeredCredential } from '@cordon/core'
import { parseConfig } from '@cordon/core/backend'
import { EgressProxy } from './egress-proxy.js'
import {
  GATEWAY_SETTINGS_ENV,
  type GatewayAck,
  type GatewayCommand,
  gatewayCommandSchema,
  gatewaySettingsSchema,
} from './gateway-commands.js'

/** Where the per-client sockets live: the gateway's own /tmp, shared with nothing. */
const SOCKET_DIR = '/tmp/cordon-egress-clients'

interface Client {
  readonly address: string
  readonly socketPath: string
  readonly listener: { close(): Promise<void> }
  /** Kept across policy changes: a new allowlist does not drop the sandbox's credentials. */
  credentials: readonly BrokeredCredential[] | undefined
}

async function main(): Promise<void> {
  const settings = parseConfig(
    gatewaySettingsSchema,
    JSON.parse(process.env[GATEWAY_SETTINGS_ENV] ?? '{}'),
    'gateway settings',
  )
  delete process.env[GATEWAY_SETTINGS_ENV]
  await mkdir(SOCKET_DIR, { recursive: true, mode: 0o700 })
  const clients = new Map<string, Client>()
  let nextClient = 1
  let control: MuxStream | undefined
  const writeLine = (value: unknown): void => {
    control?.write(`${JSON.stringify(value)}\n`)
  }
  const proxy = new EgressProxy({
    policy: { kind: 'deny-all' },
    requireClientPolicy: true,
    allowInwardFor: settings.allowInwardFor,
    allowedPorts: settings.allowedPorts,
    // Room for every client: one sandbox cannot take all tunnels or connections.
    limits: {
      maxTunnels: settings.limits?.maxTunnels ?? 4096,
      maxTunnelsPerClient: settings.limits?.maxTunnelsPerClient ?? 256,
      maxConnectionsPerClient: settings.limits?.maxConnectionsPerClient ?? 512,
    },
    ...(settings.upstreamCa ? { upstreamTls: { ca: settings.upstreamCa } } : {}),
    onDecision: writeLine,
  })
  if (settings.hostAddresses) proxy.setHostAddresses(settings.hostAddresses)

  const remove = async (clientId: string): Promise<void> => {
    const client = clients.get(clientId)
    if (!client) return
    clients.delete(clientId)
    proxy.removeClient(client.address)
    await client.listener.close()
    await rm(client.socketPath, { force: true })
  }

  const apply = async (command: GatewayCommand): Promise<GatewayAck> => {
    switch (command.op) {
      case 'add': {
        await remove(command.clientId)
        // A private IPv6 address per client: the key for its policy, never routed anywhere.
        const address = `fd00:c07d::${(nextClient++).toString(16)}`
        const socketPath = `${SOCKET_DIR}/${command.clientId}.sock`
        await rm(socketPath, { force: true })
        const credentials = command.brokeredCredentials
        proxy.setClientPolicy(address, {
          clientId: command.clientId,
          policy: command.policy,
          ...(credentials ? { brokeredCredentials: credentials } : {}),
        })
        const listener = await proxy.listenForClient(socketPath, address)
        clients.set(command.clientId, { address, socketPath, listener, credentials })
        return { type: 'ack', id: command.id, ok: true }
      }
      case 'set': {
        const client = clients.get(command.clientId)
        if (!client)
          return {
            type: 'ack',
            id: command.id,
            ok: false,
            error: `unknown client ${command.clientId}`,
          }
        if (command.brokeredCredentials) client.credentials = command.brokeredCredentials
        proxy.setClientPolicy(client.address, {
          clientId: command.clientId,
          policy: command.policy,
          ...(client.credentials ? { brokeredCredentials: client.credentials } : {}),
        })
        return { type: 'ack', id: command.id, ok: true }
      }
      case 'remove':
        await remove(command.clientId)
        return { type: 'ack', id: command.id, ok: true }
      case 'host-addresses':
        proxy.setHostAddresses(command.addresses)
        return { type: 'ack', id: command.id, ok: true }
    }
  }

  const serveControl = async (stream: MuxStream): Promise<void> => {
    control = stream
    writeLine({ type: 'ready' })
    const lines = createInterface({ input: stream, crlfDelay: Number.POSITIVE_INFINITY })
    for await (const line of lines) {
      if (line.trim() === '') continue
      let id = ''
      try {
        const raw = JSON.parse(line) as { id?: unknown }
        id = typeof raw.id === 'string' ? raw.id : ''
        writeLine(await apply(parseConfig(gatewayCommandSchema, raw, 'gateway command')))
      } catch (error) {
        writeLine({
          type: 'ack',
          id,
          ok: false,
          error: error instanceof Error ? error.message : String(error),
        } satisfies GatewayAck)
      }
    }
  }

  const mux = new StreamMux(
    process.stdin,
    // fd 1 as a socket: writes to a pipe through process.stdout would block the event loop.
    new Socket({ fd: 1, readable: false, writable: true }),
    {
      initiator: false,
      onStream: (stream, opening) => {
        stream.on('error', () => {})
        if (opening.kind === 'control' && !control) {
          void serveControl(stream)
          return
        }
        const client =
          opening.kind === 'client' && typeof opening.clientId === 'string'
            ? clients.get(opening.clientId)
            : undefined
        if (!client) {
          stream.destroy()
          return
        }
        const socket = connect(client.socketPath)
        socket.on('error', () => stream.destroy())
        pipeBothWays(stream, socket)
      },
    },
  )
  mux.onClose(() => {
    void proxy.close().finally(() => process.exit(0))
  })
}

main().catch((error: unknown) => {
  process.stderr.write(
    `cordon-egress-gateway: ${error instanceof Error ? error.message : String(error)}\n`,
  )
  process.exit(1)
})
