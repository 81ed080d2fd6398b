/**
 * The proxy applies core's one resolver rule: the shared table of answers
 * (from @cordon/conformance, which the microVM and Docker backends run too)
 * lands on the same verdict through `askResolver` itself and through a live
 * proxy, for plain requests and CONNECT tunnels alike.
 */
import { RESOLVER_ANSWER_CASES, RESOLVER_PROBE_HOSTS } from '@cordon/conformance'
import { askResolver } from '@cordon/core/backend'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { EGRESS_DENIED_HEADER } from '../src/index.js'
import {
  fakeDns,
  openTunnel,
  rawExchange,
  startProxy,
  startUpstream,
  type Upstream,
} from './helpers.js'

const TIMEOUT_MS = 100

describe.each(RESOLVER_ANSWER_CASES)('a resolver answering $name', ({ resolve, verdict }) => {
  const expectedFor = (host: string): string => {
    if (verdict.kind === 'deny-everything') return 'resolver-failed'
    return (verdict.reachable as readonly string[]).includes(host) ? 'allowed' : 'host-not-allowed'
  }

  it('is judged by the rule as the table says', async () => {
    const answer = await askResolver(resolve, TIMEOUT_MS)
    if (verdict.kind === 'enforce') {
      expect(answer).toEqual({ ok: true, allowedHosts: verdict.allowedHosts })
    } else {
      expect(answer.ok).toBe(false)
    }
  })

  describe('through a live proxy', () => {
    let upstream: Upstream
    beforeAll(async () => {
      upstream = await startUpstream()
    })
    afterAll(async () => {
      await upstream?.close()
    })

    it('lets exactly the hosts the rule allows through, asking again on every request', async () => {
      const dns = fakeDns(Object.fromEntries(RESOLVER_PROBE_HOSTS.map((h) => [h, ['127.0.0.1']])))
      const proxy = await startProxy({
        policy: { kind: 'resolver', resolve },
        resolverCacheTtlMs: 0,
        limits: { resolverTimeoutMs: TIMEOUT_MS },
        allowInwardFor: [...RESOLVER_PROBE_HOSTS],
        allowedPorts: [upstream.port],
        lookup: dns.lookup,
      })
      try {
        for (const host of RESOLVER_PROBE_HOSTS) {
          const expected = expectedFor(host)
          const plain = await rawExchange(
            proxy.running.port,
            `GET http://${host}:${upstream.port}/ HTTP/1.1\r\nConnection: close\r\n\r\n`,
          )
          const tunnel = await openTunnel(proxy.running.port, `${host}:${upstream.port}`)
          tunnel.socket.destroy()
          if (expected === 'allowed') {
            expect(plain.status, host).toBe(200)
            expect(tunnel.response.status, host).toBe(200)
          } else {
            expect(plain.headers[EGRESS_DENIED_HEADER], host).toBe(expected)
            expect(tunnel.response.headers[EGRESS_DENIED_HEADER], host).toBe(expected)
          }
          const event = await proxy.nextEvent((seen) => seen.host === host && seen.kind === 'http')
          expect(event.reason, host).toBe(expected)
        }
        // A refused name is never looked up, so DNS only saw the hosts the rule allowed.
        const allowed = RESOLVER_PROBE_HOSTS.filter((host) => expectedFor(host) === 'allowed')
        expect([...new Set(dns.calls)].sort()).toEqual(allowed.sort())
      } finally {
        await proxy.close()
      }
    })
  })
})
