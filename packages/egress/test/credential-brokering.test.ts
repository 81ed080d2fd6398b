/**
 * Brokered credentials end to end: the sandbox speaks plain HTTP with a
 * placeholder (or nothing), the proxy upgrades the upstream leg to verified
 * TLS and injects the real value there, and a placeholder headed anywhere
 * else is refused.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { EGRESS_DENIED_HEADER, type EgressProxyOptions } from '../src/index.js'
import {
  fakeDns,
  makeCertificate,
  rawExchange,
  startHttpsUpstream,
  startProxy,
  startUpstream,
  type TestCertificate,
  type TestProxy,
  type Upstream,
} from './helpers.js'

const PLACEHOLDER = 'cordon-ph-41d2e8b07a'
const SECRET = 'sk-live-real-secret-value'

describe('credential brokering', () => {
  let certificate: TestCertificate
  let secure: Upstream
  let plain: Upstream
  let proxy: TestProxy
  let baseOptions: EgressProxyOptions

  beforeAll(async () => {
    certificate = makeCertificate(['api.broker.test'])
    secure = await startHttpsUpstream(certificate)
    plain = await startUpstream()
    baseOptions = {
      policy: {
        kind: 'static',
        allowedHosts: ['api.broker.test', 'plain.test', 'unnamed.broker.test'],
      },
      allowInwardFor: ['api.broker.test', 'plain.test', 'unnamed.broker.test'],
      allowedPorts: [secure.port, plain.port],
      lookup: fakeDns({
        'api.broker.test': ['127.0.0.1'],
        'plain.test': ['127.0.0.1'],
        'unnamed.broker.test': ['127.0.0.1'],
      }).lookup,
      upstreamTls: { ca: certificate.cert },
      brokeredCredentials: [
        {
          host: 'api.broker.test',
          header: 'authorization',
          value: SECRET,
          placeholder: PLACEHOLDER,
        },
        { host: 'api.broker.test', header: 'x-api-key', value: 'key-real' },
        { host: 'unnamed.broker.test', header: 'x-api-key', value: 'key-real' },
      ],
    }
    proxy = await startProxy(baseOptions)
  })

  afterAll(async () => {
    await proxy?.close()
    await secure?.close()
    await plain?.close()
  })

  const send = (port: number, request: string | string[]) =>
    rawExchange(port, request, { timeoutMs: 5_000 })

  it('swaps the placeholder for the real value over TLS, though the sandbox spoke plain HTTP', async () => {
    const before = secure.requests.length
    const response = await send(
      proxy.running.port,
      `GET http://api.broker.test:${secure.port}/v1/models HTTP/1.1\r\n` +
        `Authorization: Bearer ${PLACEHOLDER}\r\nX-Api-Key: forged\r\nConnection: close\r\n\r\n`,
    )
    expect(response.status, response.raw).toBe(200)
    // The echo upstream sends the injected header back; it reaches the sandbox masked.
    expect(response.raw).not.toContain(SECRET)
    expect(response.body).toContain(`Bearer ${'*'.repeat(SECRET.length)}`)
    const seen = secure.requests[before]
    expect(seen?.url).toBe('/v1/models')
    expect(seen?.headers.authorization).toBe(`Bearer ${SECRET}`)
    expect(seen?.headers['x-api-key']).toBe('key-real')
    expect(seen?.headers.host).toBe(`api.broker.test:${secure.port}`)
    expect(seen?.headers['accept-encoding']).toBe('identity')
    expect(await proxy.nextEvent()).toMatchObject({
      decision: 'allow',
      host: 'api.broker.test',
      status: 200,
    })
  })

  it('cannot mask a secret an upstream echoes in a transformed form (a documented limit)', async () => {
    // An upstream that returns what it was sent, base64-encoded and split in two fields.
    const transforming = await startHttpsUpstream(certificate, (request, response) => {
      const encoded = Buffer.from(String(request.headers.authorization)).toString('base64')
      response.writeHead(200, { 'content-type': 'application/json' })
      response.end(JSON.stringify({ a: encoded.slice(0, 10), b: encoded.slice(10) }))
    })
    const transformingProxy = await startProxy({
      ...baseOptions,
      allowedPorts: [transforming.port],
    })
    try {
      const response = await send(
        transformingProxy.running.port,
        `GET http://api.broker.test:${transforming.port}/ HTTP/1.1\r\n` +
          `Authorization: Bearer ${PLACEHOLDER}\r\nConnection: close\r\n\r\n`,
      )
      expect(response.status, response.raw).toBe(200)
      // The chunked body's data lines, without the chunk sizes between them.
      const body = response.raw
        .slice(response.raw.indexOf('\r\n\r\n') + 4)
        .split('\r\n')
        .filter((_, line) => line % 2 === 1)
        .join('')
      const match = /\{"a":"([^"]*)","b":"([^"]*)"\}/.exec(body)
      expect(match, response.raw).not.toBeNull()
      const [, a, b] = match!
      // The sandbox can reassemble the secret: masking matches only the secret's own bytes.
      expect(Buffer.from(`${a}${b}`, 'base64').toString()).toBe(`Bearer ${SECRET}`)
    } finally {
      await transformingProxy.close()
      await transforming.close()
    }
  })

  it('does not inject a placeholder-bound value into a request that did not carry the placeholder', async () => {
    const before = secure.requests.length
    const response = await send(
      proxy.running.port,
      `GET http://api.broker.test:${secure.port}/ HTTP/1.1\r\nConnection: close\r\n\r\n`,
    )
    expect(response.status).toBe(200)
    expect(secure.requests[before]?.headers.authorization).toBeUndefined()
    expect(secure.requests[before]?.headers['x-api-key']).toBe('key-real')
  })

  it('names port 443 for the upstream leg when the sandbox used the plain-HTTP default', async () => {
    const response = await send(
      proxy.running.port,
      'GET http://api.broker.test/ HTTP/1.1\r\nConnection: close\r\n\r\n',
    )
    expect(response.headers[EGRESS_DENIED_HEADER]).toBe('port-not-allowed')
    expect(proxy.events.at(-1)?.port).toBe(443)
  })

  it('never sends the secret to a server that does not speak TLS', async () => {
    const response = await send(
      proxy.running.port,
      `GET http://unnamed.broker.test:${plain.port}/ HTTP/1.1\r\nConnection: close\r\n\r\n`,
    )
    expect(response.status).toBe(502)
    expect(response.headers[EGRESS_DENIED_HEADER]).toBe('connect-failed')
    expect(plain.requests).toHaveLength(0)
  })

  it('refuses an upstream whose certificate is not trusted or does not name the host', async () => {
    const untrusting = await startProxy({ ...baseOptions, upstreamTls: undefined })
    try {
      const response = await send(
        untrusting.running.port,
        `GET http://api.broker.test:${secure.port}/ HTTP/1.1\r\nConnection: close\r\n\r\n`,
      )
      expect(response.headers[EGRESS_DENIED_HEADER]).toBe('connect-failed')
    } finally {
      await untrusting.close()
    }
    // The certificate names api.broker.test only; the pinned address is the same server.
    const before = secure.requests.length
    const response = await send(
      proxy.running.port,
      `GET http://unnamed.broker.test:${secure.port}/ HTTP/1.1\r\nConnection: close\r\n\r\n`,
    )
    expect(response.headers[EGRESS_DENIED_HEADER]).toBe('connect-failed')
    expect(secure.requests.length).toBe(before)
  })

  it('refuses a placeholder in the body of a request to another host, even split across writes', async () => {
    const half = PLACEHOLDER.length / 2
    const body = `{"token":"${PLACEHOLDER}"}`
    const cut = body.indexOf(PLACEHOLDER) + half
    const response = await send(proxy.running.port, [
      `POST http://plain.test:${plain.port}/collect HTTP/1.1\r\nContent-Length: ${body.length}\r\nConnection: close\r\n\r\n`,
      body.slice(0, cut),
      body.slice(cut),
    ])
    expect(response.status).toBe(403)
    expect(response.headers[EGRESS_DENIED_HEADER]).toBe('credential-placeholder-misdirected')
    expect(plain.requests.some((request) => request.body.includes(PLACEHOLDER))).toBe(false)
    expect(proxy.events.at(-1)?.reason).toBe('credential-placeholder-misdirected')
  })

  it('refuses a placeholder in a header or URL bound for another host', async () => {
    for (const request of [
      `GET http://plain.test:${plain.port}/ HTTP/1.1\r\nAuthorization: Bearer ${PLACEHOLDER}\r\n\r\n`,
      `GET http://plain.test:${plain.port}/?t=${PLACEHOLDER} HTTP/1.1\r\n\r\n`,
      // Percent-encoded, beside a malformed escape that a strict decoder gives up on.
      `GET http://plain.test:${plain.port}/?x=%ZZ&k=%63${PLACEHOLDER.slice(1)} HTTP/1.1\r\n\r\n`,
      `GET http://plain.test:${plain.port}/ HTTP/1.1\r\nX-K: %ZZ %63${PLACEHOLDER.slice(1)}\r\n\r\n`,
    ]) {
      const response = await send(proxy.running.port, request)
      expect(response.headers[EGRESS_DENIED_HEADER]).toBe('credential-placeholder-misdirected')
    }
    expect(plain.requests).toHaveLength(0)
  })

  it('lets a client registration carry its own credentials', async () => {
    const perClient = await startProxy({ ...baseOptions, brokeredCredentials: [] })
    try {
      perClient.proxy.setClientPolicy('127.0.0.2', {
        clientId: 'sbx_abcdefghijklmnopqrstuvwxyz',
        policy: { kind: 'static', allowedHosts: ['api.broker.test'] },
        brokeredCredentials: [
          {
            host: 'api.broker.test',
            header: 'authorization',
            value: 'Bearer client-two',
            placeholder: PLACEHOLDER,
          },
        ],
      })
      const request = `GET http://api.broker.test:${secure.port}/ HTTP/1.1\r\nAuthorization: ${PLACEHOLDER}\r\nConnection: close\r\n\r\n`
      const before = secure.requests.length
      expect(
        (await rawExchange(perClient.running.port, request, { localAddress: '127.0.0.2' })).status,
      ).toBe(200)
      expect(secure.requests[before]?.headers.authorization).toBe('Bearer client-two')
      // Another client has no credentials: plain HTTP upstream leg, placeholder untouched, TLS server refuses it.
      const other = await rawExchange(perClient.running.port, request, {
        localAddress: '127.0.0.3',
      })
      expect(other.status).not.toBe(200)
      expect(
        secure.requests
          .slice(before)
          .some((seen) => seen.headers.authorization === 'Bearer client-two'),
      ).toBe(true)
    } finally {
      await perClient.close()
    }
  })
})
