/**
 * Every way we know to talk an egress proxy past its policy, each sent as raw
 * bytes to a real proxy on loopback. Each must be refused with its reason code
 * in the response header and in the decision event, the proxy must close the
 * connection itself (a denied client is never left hanging), and the loopback
 * upstream must never see a byte.
 */
import { createServer } from 'node:net'
import type { EgressReasonCode } from '@cordon/core'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { EGRESS_DENIED_HEADER } from '../src/index.js'
import {
  fakeDns,
  type RawResponse,
  rawExchange,
  startProxy,
  startUpstream,
  type TestProxy,
  type Upstream,
} from './helpers.js'

const PLACEHOLDER = 'cordon-ph-7f3a9c2e'

/** A port nothing listens on now, for the proxy to bind so it can name itself in its own config. */
function freePort(): Promise<number> {
  return new Promise((resolve) => {
    const server = createServer()
    server.listen(0, '127.0.0.1', () => {
      const address = server.address()
      const port = typeof address === 'object' && address !== null ? address.port : 0
      server.close(() => resolve(port))
    })
  })
}

const dnsTable = {
  'upstream.test': ['127.0.0.1'],
  'self.test': ['127.0.0.1'],
  'loopback.test': ['127.0.0.1'],
  'loopback-other.test': ['127.8.9.10'],
  'rfc1918-a.test': ['10.1.2.3'],
  'rfc1918-b.test': ['172.20.0.5'],
  'rfc1918-c.test': ['192.168.1.1'],
  'cgnat.test': ['100.64.0.1'],
  'metadata.test': ['169.254.169.254'],
  'benchmark.test': ['198.18.0.1'],
  'multicast.test': ['224.0.0.251'],
  'reserved.test': ['240.0.0.1'],
  'broadcast.test': ['255.255.255.255'],
  'this-network.test': ['0.0.0.0'],
  'this-network-b.test': ['0.1.2.3'],
  'v6-loopback.test': ['::1'],
  'v6-unspecified.test': ['::'],
  'ula.test': ['fd00:ec2::254'],
  'v6-link-local.test': ['fe80::1'],
  'v6-multicast.test': ['ff02::1'],
  'mapped.test': ['::ffff:127.0.0.1'],
  'mapped-private.test': ['::ffff:10.0.0.1'],
  'compatible.test': ['::a00:1'],
  'nat64.test': ['64:ff9b::a9fe:a9fe'],
  'nat64-local.test': ['64:ff9b:1::1'],
  'sixtofour.test': ['2002:a00:1::1'],
  'teredo.test': ['2001:0:4136:e378:8000:63bf:3fff:fdd2'],
  'odd-spelling.test': ['0x7f.1'],
  'multi.test': ['93.184.216.34', '10.0.0.5'],
  'multi-public-first.test': ['2606:4700::1111', '127.0.0.1'],
} as const

describe('bypass corpus', () => {
  let upstream: Upstream
  let proxy: TestProxy
  let proxyPort: number
  const dns = fakeDns({ ...dnsTable })

  beforeAll(async () => {
    upstream = await startUpstream()
    proxyPort = await freePort()
    proxy = await startProxy(
      {
        policy: { kind: 'allow-all' },
        allowInwardFor: ['upstream.test', 'self.test'],
        allowedPorts: [80, 443, upstream.port, proxyPort],
        lookup: dns.lookup,
        limits: { dnsTimeoutMs: 200, connectTimeoutMs: 1_000 },
        brokeredCredentials: [
          {
            host: 'api.broker.test',
            header: 'authorization',
            value: 'Bearer real-secret',
            placeholder: PLACEHOLDER,
          },
        ],
      },
      proxyPort,
    )
  })

  afterAll(async () => {
    await proxy?.close()
    await upstream?.close()
  })

  async function expectRefused(
    response: RawResponse,
    reason: EgressReasonCode,
    status = 403,
  ): Promise<void> {
    expect(response.status, response.raw).toBe(status)
    expect(response.headers[EGRESS_DENIED_HEADER]).toBe(reason)
    expect(response.closed, 'the proxy closed the connection').toBe(true)
    expect(proxy.events.at(-1)?.reason).toBe(reason)
    expect(proxy.events.at(-1)?.decision).toBe('deny')
    expect(upstream.requests).toHaveLength(0)
  }

  const connect = (authority: string, extra = `Host: ${authority}\r\n`) =>
    rawExchange(proxyPort, `CONNECT ${authority} HTTP/1.1\r\n${extra}\r\n`)
  const get = (url: string, headers = '') =>
    rawExchange(proxyPort, `GET ${url} HTTP/1.1\r\n${headers}Connection: close\r\n\r\n`)

  describe('resolved addresses in every screened class', () => {
    const cases: [string, EgressReasonCode][] = [
      ['loopback.test', 'address-loopback'],
      ['loopback-other.test', 'address-loopback'],
      ['rfc1918-a.test', 'address-private'],
      ['rfc1918-b.test', 'address-private'],
      ['rfc1918-c.test', 'address-private'],
      ['cgnat.test', 'address-private'],
      ['metadata.test', 'address-link-local'],
      ['benchmark.test', 'address-reserved'],
      ['multicast.test', 'address-reserved'],
      ['reserved.test', 'address-reserved'],
      ['broadcast.test', 'address-reserved'],
      ['this-network.test', 'address-reserved'],
      ['this-network-b.test', 'address-reserved'],
      ['v6-loopback.test', 'address-loopback'],
      ['v6-unspecified.test', 'address-reserved'],
      ['ula.test', 'address-private'],
      ['v6-link-local.test', 'address-link-local'],
      ['v6-multicast.test', 'address-reserved'],
      ['mapped.test', 'address-loopback'],
      ['mapped-private.test', 'address-private'],
      ['compatible.test', 'address-private'],
      ['nat64.test', 'address-link-local'],
      ['nat64-local.test', 'address-reserved'],
      ['sixtofour.test', 'address-private'],
      ['teredo.test', 'address-reserved'],
      ['odd-spelling.test', 'address-loopback'],
    ]

    it.each(cases)('CONNECT %s:443 is refused as %s', async (host, reason) => {
      await expectRefused(await connect(`${host}:443`), reason)
      expect(proxy.events.at(-1)?.kind).toBe('connect')
    })

    it.each(cases)('GET http://%s/ is refused as %s', async (host, reason) => {
      await expectRefused(await get(`http://${host}/`, `Host: ${host}\r\n`), reason)
      expect(proxy.events.at(-1)?.kind).toBe('http')
    })

    it('refuses a name with one private answer among public ones, whichever comes first', async () => {
      await expectRefused(await connect('multi.test:443'), 'address-private')
      await expectRefused(await connect('multi-public-first.test:443'), 'address-loopback')
      expect(proxy.events.at(-1)?.address).toBe('127.0.0.1')
    })
  })

  describe('IP literals in any spelling', () => {
    const literals: [string, EgressReasonCode][] = [
      ['127.0.0.1', 'address-loopback'],
      ['0x7f.1', 'address-loopback'],
      ['0x7f000001', 'address-loopback'],
      ['2130706433', 'address-loopback'],
      ['0177.0.0.1', 'address-loopback'],
      ['017700000001', 'address-loopback'],
      ['127.1', 'address-loopback'],
      ['127.0.1', 'address-loopback'],
      ['127.0.0.1.', 'address-loopback'],
      ['0', 'address-reserved'],
      ['0.0.0.0', 'address-reserved'],
      ['169.254.169.254', 'address-link-local'],
      ['0xa9.0xfe.0xa9.0xfe', 'address-link-local'],
      ['0251.0376.0251.0376', 'address-link-local'],
      ['169.254.43518', 'address-link-local'],
      ['2852039166', 'address-link-local'],
      ['10.0.0.1', 'address-private'],
      ['012.0.0.1', 'address-private'],
      ['192.168.0.1', 'address-private'],
      ['[::1]', 'address-loopback'],
      ['[0:0:0:0:0:0:0:1]', 'address-loopback'],
      ['[::]', 'address-reserved'],
      ['[::ffff:127.0.0.1]', 'address-loopback'],
      ['[::ffff:7f00:1]', 'address-loopback'],
      ['[::ffff:a9fe:a9fe]', 'address-link-local'],
      ['[::127.0.0.1]', 'address-loopback'],
      ['[fe80::1%25eth0]', 'address-link-local'],
      ['[fd00::1]', 'address-private'],
      ['[64:ff9b::7f00:1]', 'address-loopback'],
      ['[2002:7f00:1::]', 'address-loopback'],
      ['[2001:db8::1]', 'address-reserved'],
    ]

    it.each(literals)('CONNECT %s:443 is refused as %s', async (host, reason) => {
      await expectRefused(await connect(`${host}:443`), reason)
    })

    it.each(literals)('GET http://%s/ is refused as %s', async (host, reason) => {
      await expectRefused(await get(`http://${host}/`), reason)
    })

    it('never asks DNS about something that looks like an address', async () => {
      const before = dns.calls.length
      await expectRefused(await connect('1.2.3.4.5:443'), 'bad-request')
      await expectRefused(await connect('foo.0x10:443'), 'bad-request')
      await expectRefused(await connect('256.0.0.1:443'), 'bad-request')
      // The request line is bytes, not Unicode: full-width digits arrive as
      // Latin-1 noise and are refused as malformed before IDNA could map them.
      await expectRefused(await connect('１２７．０．０．１:443'), 'bad-request')
      expect(dns.calls.length).toBe(before)
    })
  })

  describe('request confusion', () => {
    it('refuses a Host header that disagrees with the absolute-URI authority', async () => {
      await expectRefused(
        await get(`http://upstream.test:${upstream.port}/`, 'Host: metadata.test\r\n'),
        'host-mismatch',
      )
      await expectRefused(
        await get(`http://upstream.test:${upstream.port}/`, 'Host: upstream.test\r\n'),
        'host-mismatch',
      )
      await expectRefused(
        await get(
          `http://upstream.test:${upstream.port}/`,
          `Host: upstream.test:${upstream.port}\r\nHost: metadata.test\r\n`,
        ),
        'host-mismatch',
      )
    })

    it('refuses a CONNECT whose Host header names another host', async () => {
      await expectRefused(
        await connect(`upstream.test:${upstream.port}`, 'Host: metadata.test:443\r\n'),
        'host-mismatch',
      )
    })

    it('refuses Content-Length with Transfer-Encoding, in either order', async () => {
      const smuggle = (headers: string) =>
        rawExchange(
          proxyPort,
          `POST http://upstream.test:${upstream.port}/ HTTP/1.1\r\nHost: upstream.test:${upstream.port}\r\n${headers}\r\n0\r\n\r\nGET http://metadata.test/ HTTP/1.1\r\n\r\n`,
        )
      await expectRefused(
        await smuggle('Content-Length: 5\r\nTransfer-Encoding: chunked\r\n'),
        'ambiguous-length',
      )
      await expectRefused(
        await smuggle('Transfer-Encoding: chunked\r\nContent-Length: 5\r\n'),
        'ambiguous-length',
      )
      await expectRefused(
        await smuggle('Content-Length: 5\r\nContent-Length: 6\r\n'),
        'ambiguous-length',
      )
      await expectRefused(await smuggle('Transfer-Encoding: gzip, chunked\r\n'), 'ambiguous-length')
    })

    it('refuses requests that are not absolute http:// URIs, or carry user info', async () => {
      await expectRefused(await get('/', 'Host: upstream.test\r\n'), 'bad-request')
      await expectRefused(await get('https://upstream.test/'), 'bad-request')
      await expectRefused(
        await get(`http://user:pw@upstream.test:${upstream.port}/`),
        'bad-request',
      )
      await expectRefused(await get('http://upstream.test:99999/'), 'bad-request')
      await expectRefused(await get('http:///'), 'bad-request')
    })

    it('refuses a WebSocket upgrade over plain HTTP', async () => {
      await expectRefused(
        await get(
          `http://upstream.test:${upstream.port}/`,
          'Upgrade: websocket\r\nConnection: Upgrade\r\n',
        ),
        'bad-request',
      )
    })

    it('refuses a CONNECT carrying a body', async () => {
      await expectRefused(
        await connect(
          `upstream.test:${upstream.port}`,
          `Host: upstream.test:${upstream.port}\r\nContent-Length: 4\r\n`,
        ),
        'ambiguous-length',
      )
    })
  })

  describe('ports and the proxy itself', () => {
    it('refuses CONNECT to a port not in allowedPorts, before any lookup', async () => {
      const before = dns.calls.length
      await expectRefused(await connect('upstream.test:22'), 'port-not-allowed')
      await expectRefused(await connect('upstream.test:6379'), 'port-not-allowed')
      expect(dns.calls.length).toBe(before)
    })

    it('refuses malformed CONNECT targets', async () => {
      for (const authority of [
        'upstream.test',
        'upstream.test:0',
        'upstream.test:65536',
        '::1:443',
        'a@b:443',
      ]) {
        await expectRefused(await connect(authority, ''), 'bad-request')
      }
    })

    it('refuses to connect to itself, by literal or by an exempted name', async () => {
      await expectRefused(await connect(`127.0.0.1:${proxyPort}`), 'address-proxy-self')
      await expectRefused(await connect(`self.test:${proxyPort}`), 'address-proxy-self')
      await expectRefused(await connect(`127.0.0.2:${proxyPort}`), 'address-proxy-self')
      await expectRefused(await get(`http://self.test:${proxyPort}/`), 'address-proxy-self')
    })
  })

  describe('credentials and DNS failures', () => {
    it('refuses a placeholder sent to a host it is not bound to, wherever it is carried', async () => {
      const target = `http://upstream.test:${upstream.port}`
      const host = `Host: upstream.test:${upstream.port}\r\n`
      await expectRefused(
        await get(`${target}/`, `${host}Authorization: Bearer ${PLACEHOLDER}\r\n`),
        'credential-placeholder-misdirected',
      )
      await expectRefused(
        await get(`${target}/?key=${PLACEHOLDER}`, host),
        'credential-placeholder-misdirected',
      )
      await expectRefused(
        await get(`${target}/`, `${host}X-Smuggle: a${PLACEHOLDER}b\r\n`),
        'credential-placeholder-misdirected',
      )
    })

    it('refuses an unresolvable name and a lookup that never answers', async () => {
      await expectRefused(await connect('nxdomain.test:443'), 'dns-failed')
      dns.table['hang.test'] = 'hang'
      await expectRefused(await connect('hang.test:443'), 'dns-timeout')
    })
  })
})
