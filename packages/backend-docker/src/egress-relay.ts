import { PassThrough } from 'node:stream'
import { LABEL, type ResourceRole } from '@cordon/core/backend'
import type Docker from 'dockerode'
import { serviceHostConfig } from './container-spec.js'

/** Where the sandbox's HTTP proxy listens, inside the sandbox's own network namespace. */
export const RELAY_PORT = 3128
export const EGRESS_SOCKET_DIR = '/run/cordon-egress'

/**
 * The relay, run by `node -e` in a container that joins the sandbox's network
 * namespace (which has only loopback): it accepts on 127.0.0.1:3128 and
 * splices each connection onto the sandbox's own unix socket at the gateway.
 * The sandbox therefore has no network interface at all, yet ordinary tools
 * reach the gateway through HTTP_PROXY.
 */
const RELAY_SOURCE = `
const net = require('node:net')
const socketPath = process.argv[1]
const server = net.createServer((client) => {
  const upstream = net.connect(socketPath)
  client.on('error', () => upstream.destroy())
  upstream.on('error', () => client.destroy())
  client.pipe(upstream)
  upstream.pipe(client)
})
server.listen(${RELAY_PORT}, '127.0.0.1', () => process.stdout.write('ready\\n'))
`

/** Relays are made ahead of the sandboxes that adopt them, so they are named for themselves. */
export function relayContainerName(relayId: string): string {
  return `cordon-relay-${relayId}`
}

export interface RelayHandle {
  /** Names the relay's container and its socket at the gateway. */
  readonly relayId: string
  readonly container: Docker.Container
  /** Starts the relay's container; the sandbox may join its namespace once this resolves. */
  start(): Promise<void>
  /** Resolves once the relay listens on 127.0.0.1:3128. */
  readonly ready: Promise<void>
}

/**
 * Creates the relay for one sandbox. Its container owns the sandbox's network
 * namespace (network mode `none`: loopback only), which the sandbox joins.
 */
export async function createRelay(options: {
  readonly docker: Docker
  readonly image: string
  readonly relayId: string
  readonly socketPath: string
  readonly volumeName: string
  readonly labels: Record<string, string>
  readonly signal?: AbortSignal
}): Promise<RelayHandle> {
  const { docker } = options
  const role: ResourceRole = 'relay'
  const container = await docker.createContainer({
    name: relayContainerName(options.relayId),
    Image: options.image,
    Entrypoint: ['node', '-e', RELAY_SOURCE],
    Cmd: [options.socketPath],
    User: '1000:1000',
    Labels: { ...options.labels, [LABEL.role]: role },
    AttachStdout: true,
    AttachStderr: true,
    NetworkDisabled: true,
    HostConfig: serviceHostConfig({
      networkMode: 'none',
      memoryMb: 64,
      pidsLimit: 32,
      mounts: [
        { Type: 'volume', Source: options.volumeName, Target: EGRESS_SOCKET_DIR, ReadOnly: true },
      ],
    }),
    abortSignal: options.signal,
  } as Docker.ContainerCreateOptions)
  const stream = await container.attach({ stream: true, stdout: true, stderr: true })
  const stdout = new PassThrough()
  docker.modem.demuxStream(stream, stdout, new PassThrough())
  const ready = new Promise<void>((resolve, reject) => {
    let seen = ''
    stdout.on('data', (chunk: Buffer) => {
      seen += chunk.toString()
      if (seen.includes('ready\n')) {
        resolve()
        ;(stream as unknown as { destroy?: () => void }).destroy?.()
      }
    })
    stream.on('end', () => reject(new Error('the egress relay exited before it listened')))
  })
  ready.catch(() => {})
  return { relayId: options.relayId, container, start: () => container.start(), ready }
}
