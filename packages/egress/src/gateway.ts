#!/usr/bin/env node
/**
 * `cordon-egress-gateway`: the egress proxy as a sandbox gateway. Each client
 * (sandbox) gets its own unix socket under `socketDir`, and a connection's
 * client is the socket it arrived on. Commands arrive as JSON lines on stdin
 * (see gateway-commands.ts); stdout carries JSON lines only: acknowledgements
 * and one `{"type":"egress",…}` decision event per request or tunnel.
 * Diagnostics go to stderr. The process ends when stdin closes, so a gateway
 * whose host is gone does not linger.
 */
import { rm } from 'node:fs/promises'
import { createInterface } from 'node:readline'
import { parseConfig } from '@cordon/core/backend'
import { EgressProxy } from './egress-proxy.js'
import {
  GATEWAY_SETTINGS_ENV,
  type GatewayAck,
  type GatewayCommand,
  gatewayCommandSchema,
  gatewaySettingsSchema,
} from './gateway-commands.js'

interface Client {
  readonly address: string
  readonly socketPath: string
  readonly listener: { close(): Promise<void> }
}

function writeLine(value: unknown): void {
  process.stdout.write(`${JSON.stringify(value)}\n`)
}

async function main(): Promise<void> {
  const settings = parseConfig(
    gatewaySettingsSchema,
    JSON.parse(process.env[GATEWAY_SETTINGS_ENV] ?? '{}'),
    'gateway settings',
  )
  const clients = new Map<string, Client>()
  let nextClient = 1
  const proxy = new EgressProxy({
    policy: { kind: 'deny-all' },
    requireClientPolicy: true,
    allowInwardFor: settings.allowInwardFor,
    allowedPorts: settings.allowedPorts,
    ...(settings.upstreamCa ? { upstreamTls: { ca: settings.upstreamCa } } : {}),
    onDecision: writeLine,
  })

  const apply = async (command: GatewayCommand): Promise<GatewayAck> => {
    switch (command.op) {
      case 'add': {
        await remove(command.clientId)
        // A private IPv6 address per client: the key for its policy, never routed anywhere.
        const address = `fd00:c07d::${(nextClient++).toString(16)}`
        const socketPath = `${settings.socketDir}/${command.socketName ?? command.clientId}.sock`
        await rm(socketPath, { force: true })
        proxy.setClientPolicy(address, {
          clientId: command.clientId,
          policy: command.policy,
          ...(command.brokeredCredentials
            ? { brokeredCredentials: command.brokeredCredentials }
            : {}),
        })
        const listener = await proxy.listenForClient(socketPath, address)
        clients.set(command.clientId, { address, socketPath, listener })
        return { type: 'ack', id: command.id, ok: true, socketPath }
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
        proxy.setClientPolicy(client.address, {
          clientId: command.clientId,
          policy: command.policy,
        })
        return { type: 'ack', id: command.id, ok: true }
      }
      case 'remove':
        await remove(command.clientId)
        return { type: 'ack', id: command.id, ok: true }
    }
  }

  const remove = async (clientId: string): Promise<void> => {
    const client = clients.get(clientId)
    if (!client) return
    clients.delete(clientId)
    proxy.removeClient(client.address)
    await client.listener.close()
    await rm(client.socketPath, { force: true })
  }

  writeLine({ type: 'ready' })
  const lines = createInterface({ input: process.stdin, crlfDelay: Number.POSITIVE_INFINITY })
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
  await proxy.close()
  process.exit(0)
}

main().catch((error: unknown) => {
  process.stderr.write(
    `cordon-egress-gateway: ${error instanceof Error ? error.message : String(error)}\n`,
  )
  process.exit(1)
})
