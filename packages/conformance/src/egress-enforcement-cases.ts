import { createServer, type Server, type Socket } from 'node:net'
import { networkInterfaces } from 'node:os'
import { type EgressPolicy, type EgressPolicyKind, SandboxControlRefusedError } from '@cordon/core'
import { describe, expect, it } from 'vitest'
import { expectRefused } from './refusal.js'
import type { SandboxesUnderTest } from './shared-sandbox.js'
import type { SandboxConformanceOptions } from './suite-options.js'

/** The restrictive egress kinds, each allowing nothing this host serves. */
const RESTRICTIVE: ReadonlyArray<readonly [EgressPolicyKind, EgressPolicy]> = [
  ['deny-all', { kind: 'deny-all' }],
  ['static', { kind: 'static', allowedHosts: ['example.com'] }],
  ['resolver', { kind: 'resolver', resolve: async () => ['example.com'] }],
]

/** How many of this host's own addresses a sandbox tries, besides loopback. */
const MAX_HOST_ADDRESSES = 4

/**
 * This host's IPv4 addresses: loopback (a backend whose sandboxes share the
 * host's network reaches it there) and a few of its interfaces' (a bridge's
 * gateway, the host's own), all of which a listener on every address serves.
 */
function hostAddresses(): string[] {
  const external = Object.values(networkInterfaces())
    .flatMap((addresses) => addresses ?? [])
    .filter((address) => address.family === 'IPv4' && !address.internal)
    .map((address) => address.address)
  return ['127.0.0.1', ...new Set(external)].slice(0, 1 + MAX_HOST_ADDRESSES)
}

/**
 * Egress enforced, proved from inside: a sandbox under each restrictive kind
 * the backend declares (`deny-all`; `static` and `resolver` allowing only
 * `example.com`) tries to reach a TCP listener this process runs on every
 * address, directly (`nc`) and through any proxy its environment names
 * (`wget`, which follows `http_proxy`), at this host's loopback and
 * interface addresses; the listener must see no connection and the sandbox
 * no answer. A sandbox lacking either tool fails the case rather than
 * passing it unheard. A backend that reports a kind it does not enforce fails here,
 * whatever `sandbox.enforced` says. Where a kind is not declared, it is
 * checked as a refusal instead; a declared kind a deployment cannot give
 * (a control plane without allowlists) may be refused at create naming it.
 */
export function egressEnforcementCases(
  options: SandboxConformanceOptions,
  sandboxes: SandboxesUnderTest,
): void {
  const timeout = options.timeoutMs ?? 60_000

  describe('egress enforced from inside', () => {
    it(
      'each restrictive egress kind declared keeps a sandbox from a listener on this host, directly and through its proxy; one not declared is refused',
      async () => {
        let connections = 0
        const open = new Set<Socket>()
        const server: Server = createServer((socket) => {
          connections++
          open.add(socket)
          socket.on('close', () => open.delete(socket))
          socket.on('error', () => {})
          socket.end('HTTP/1.0 200 OK\r\nContent-Length: 7\r\n\r\nreached')
        })
        await new Promise<void>((resolve) => server.listen(0, '0.0.0.0', resolve))
        const port = (server.address() as { port: number }).port
        try {
          // A probe that cannot run would read as blocked: a sandbox without
          // `nc` or `wget` names what it lacks, and that fails the case.
          const script = [
            'for tool in nc wget; do command -v "$tool" >/dev/null 2>&1 || echo "lacks $tool"; done',
            'for address in "$@"; do',
            `  nc -w 2 "$address" ${port} </dev/null >/dev/null 2>&1 && echo "reached $address directly"`,
            `  wget -q -T 3 -O - "http://$address:${port}/" 2>/dev/null | grep -q reached && echo "reached $address over HTTP"`,
            'done',
            'echo tried',
          ].join('\n')
          for (const [kind, policy] of RESTRICTIVE) {
            if (!sandboxes.declared.egress.includes(kind)) {
              await expectRefused(sandboxes, { egress: policy }, `egress.${kind}`)
              continue
            }
            // A declared kind this deployment cannot give may still be refused
            // at create, naming it (a control plane without allowlists); one
            // accepted is enforced.
            const tried = await sandboxes
              .withFresh({ egress: policy }, (sandbox) =>
                sandbox.exec('sh', ['-c', script, 'sh', ...hostAddresses()], { timeout: 45_000 }),
              )
              .catch((error: unknown) => {
                if (
                  SandboxControlRefusedError.isInstance(error) &&
                  error.control === `egress.${kind}` &&
                  error.backend === sandboxes.provider.backend
                )
                  return { stdout: 'tried\n' }
                throw error
              })
            expect(
              tried.stdout,
              `${kind}: what the sandbox reached, or a tool it lacks (the case needs nc and wget)`,
            ).toBe('tried\n')
            expect(connections, `${kind}: connections the listener saw`).toBe(0)
          }
        } finally {
          // A connection a sandbox left half-open must not hold the close.
          for (const socket of open) socket.destroy()
          await new Promise((resolve) => server.close(resolve))
        }
      },
      timeout * 3,
    )
  })
}
