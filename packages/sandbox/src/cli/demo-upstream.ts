import { createServer, type Server } from 'node:http'
import type { AddressInfo } from 'node:net'

/**
 * A small web server for the demo, on the host, that only the egress gateway
 * can reach (the sandbox itself has no route to the host). It listens on all
 * addresses because a container reaches the host through a bridge address.
 */
export async function startDemoUpstream(): Promise<{ port: number; close(): Promise<void> }> {
  const server: Server = createServer((request, response) => {
    response.end(`hello from the demo upstream: ${request.method} ${request.url}\n`)
  })
  await new Promise<void>((resolve) => server.listen(0, '0.0.0.0', resolve))
  return {
    port: (server.address() as AddressInfo).port,
    close: () => new Promise<void>((resolve) => server.close(() => resolve())),
  }
}

/** The host's address on the engine's default bridge, as containers see it. */
export async function hostBridgeAddress(docker: {
  getNetwork(name: string): { inspect(): Promise<unknown> }
}): Promise<string> {
  const info = (await docker.getNetwork('bridge').inspect()) as {
    IPAM?: { Config?: Array<{ Gateway?: string }> }
  }
  return info.IPAM?.Config?.find((entry) => entry.Gateway)?.Gateway ?? '172.17.0.1'
}
