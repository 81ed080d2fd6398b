/**
 * Runs one Node proxy under test in its own process: `cordon` (the
 * EgressProxy) or `proxy-chain`. Arguments: the proxy's name and the
 * upstream's port. Prints `{"port":N}` once listening on 127.0.0.1.
 */
import { pathToFileURL } from 'node:url'
import { Server as ProxyChainServer } from 'proxy-chain'
import { UPSTREAM_HOST } from './upstream-name.js'

/**
 * `CORDON_BENCH_EGRESS=/path/to/egress/dist/index.js` measures another build
 * of the proxy (a proposed change, before it lands); by default it is the
 * workspace's `@cordon/egress`.
 */
const alternative = process.env.CORDON_BENCH_EGRESS
const { EgressProxy }: typeof import('@cordon/egress') = alternative
  ? await import(pathToFileURL(alternative).href)
  : await import('@cordon/egress')

async function main(): Promise<number> {
  const [kind, portText] = process.argv.slice(2)
  const upstreamPort = Number(portText)
  if (kind === 'cordon') {
    // Loopback is screened unless the name is exempted with allowInwardFor;
    // the lookup answers for the one name, so no DNS is involved.
    const proxy = new EgressProxy({
      policy: { kind: 'static', allowedHosts: [UPSTREAM_HOST] },
      allowInwardFor: [UPSTREAM_HOST],
      allowedPorts: [upstreamPort],
      lookup: async (hostname) => {
        if (hostname !== UPSTREAM_HOST) throw new Error(`no such host ${hostname}`)
        return [{ address: '127.0.0.1', family: 4 }]
      },
    })
    const running = await proxy.listen({ host: '127.0.0.1', port: 0 })
    return running.port
  }
  if (kind === 'proxy-chain') {
    const server = new ProxyChainServer({ host: '127.0.0.1', port: 0, verbose: false })
    await server.listen()
    return server.port
  }
  throw new Error(`unknown proxy ${kind}`)
}

main().then(
  (port) => process.stdout.write(`${JSON.stringify({ port })}\n`),
  (error: unknown) => {
    process.stderr.write(`${String(error)}\n`)
    process.exit(1)
  },
)
process.on('SIGTERM', () => process.exit(0))
