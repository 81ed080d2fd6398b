#!/usr/bin/env node
/**
 * `cordon-egress`: the proxy on its own, for a gateway container or a host
 * without Node code of its own.
 *
 *   cordon-egress --config /etc/cordon/egress.json
 *   CORDON_EGRESS_CONFIG='{"control":{"token":"…"}}' cordon-egress
 *
 * stdout carries JSON lines only: first `{"type":"listening",…}` with the
 * bound addresses, then one `{"type":"egress",…}` decision event per request
 * or tunnel. Diagnostics go to stderr. Exit status: 0 after SIGTERM/SIGINT,
 * 2 for an invalid config, 1 for anything else.
 */
import { readFile } from 'node:fs/promises'
import type { Server } from 'node:http'
import type { AddressInfo } from 'node:net'
import { SandboxConfigValidationError } from '@cordon/core'
import { type CliConfig, CONFIG_ENV, parseCliConfig } from './cli-config.js'
import { type ClientRegistry, createControlServer } from './control-server.js'
import { EgressProxy } from './egress-proxy.js'

async function loadConfig(argv: readonly string[]): Promise<CliConfig> {
  const flag = argv.indexOf('--config')
  if (flag !== -1) {
    const path = argv[flag + 1]
    if (path === undefined)
      throw new SandboxConfigValidationError('command line', [
        { path: '--config', message: 'needs a file path' },
      ])
    return parseCliConfig(await readFile(path, 'utf8'), `egress config ${path}`)
  }
  const inline = process.env[CONFIG_ENV]
  if (inline === undefined || inline === '') {
    throw new SandboxConfigValidationError('command line', [
      { path: '--config', message: `give --config <file> or set ${CONFIG_ENV} to the JSON config` },
    ])
  }
  return parseCliConfig(inline, `egress config in ${CONFIG_ENV}`)
}

function writeLine(value: unknown): void {
  process.stdout.write(`${JSON.stringify(value)}\n`)
}

function listenControl(server: Server, host: string, port: number): Promise<AddressInfo> {
  return new Promise((resolve, reject) => {
    server.once('error', reject)
    server.listen({ host, port }, () => {
      server.off('error', reject)
      server.on('error', (error) =>
        process.stderr.write(`cordon-egress: control endpoint: ${error.message}\n`),
      )
      resolve(server.address() as AddressInfo)
    })
  })
}

function urlOf(host: string, port: number): string {
  return `http://${host.includes(':') ? `[${host}]` : host}:${port}`
}

async function main(): Promise<void> {
  const config = await loadConfig(process.argv.slice(2))
  let proxy: EgressProxy | undefined
  // The control server binds first so its address can be handed to the proxy
  // as an endpoint it must never dial. The proxy is constructed in the same
  // turn the bind completes, before any control request can be read.
  const registry: ClientRegistry = {
    setClientPolicy: (address, client) => proxy!.setClientPolicy(address, client),
    removeClient: (address) => proxy!.removeClient(address),
  }
  const control = createControlServer(registry, config.control.token)
  const controlAddress = await listenControl(
    control,
    config.control.host ?? '127.0.0.1',
    config.control.port ?? 0,
  )
  proxy = new EgressProxy({
    policy: config.policy,
    brokeredCredentials: config.brokeredCredentials,
    allowInwardFor: config.allowInwardFor,
    allowedPorts: config.allowedPorts,
    limits: config.limits,
    upstreamTls: config.upstreamTls,
    requireClientPolicy: config.requireClientPolicy,
    resolverCacheTtlMs: config.resolverCacheTtlMs,
    protectedEndpoints: [{ address: controlAddress.address, port: controlAddress.port }],
    onDecision: writeLine,
  })
  for (const client of config.clients ?? []) {
    proxy.setClientPolicy(client.address, client)
  }
  const running = await proxy.listen({
    host: config.listen?.host ?? '127.0.0.1',
    port: config.listen?.port ?? 3128,
  })
  writeLine({
    type: 'listening',
    proxy: { host: running.host, port: running.port, url: running.url },
    control: {
      host: controlAddress.address,
      port: controlAddress.port,
      url: urlOf(controlAddress.address, controlAddress.port),
    },
  })

  let stopping = false
  const stop = (): void => {
    if (stopping) return
    stopping = true
    control.closeAllConnections()
    Promise.all([
      running.close(),
      new Promise<void>((resolve) => control.close(() => resolve())),
    ]).then(
      () => process.exit(0),
      () => process.exit(1),
    )
  }
  process.once('SIGTERM', stop)
  process.once('SIGINT', stop)
}

main().catch((error: unknown) => {
  process.stderr.write(`cordon-egress: ${error instanceof Error ? error.message : String(error)}\n`)
  process.exit(SandboxConfigValidationError.isInstance(error) ? 2 : 1)
})
