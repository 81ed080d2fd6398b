import { afterEach, describe, expect, it } from 'vitest'
import { fakeDns, rawExchange, startProxy, type TestProxy } from './helpers.js'

/** Public, so only being the host's makes it refused. */
const HOST_PUBLIC = '11.22.33.44'

describe('the addresses of the host the proxy serves', () => {
  let running: TestProxy | undefined
  afterEach(async () => {
    await running?.close()
    running = undefined
  })

  it('refuses each as the proxy itself under allow-all, by literal, mapped literal and name', async () => {
    const dns = fakeDns({ 'host.test': [HOST_PUBLIC] })
    running = await startProxy({ policy: { kind: 'allow-all' }, lookup: dns.lookup })
    running.proxy.setHostAddresses(['::ffff:11.22.33.44', '2001:4860::1'])
    for (const target of [
      `${HOST_PUBLIC}:80`,
      `[::ffff:${HOST_PUBLIC}]:80`,
      'host.test:443',
      '[2001:4860::1]:80',
    ]) {
      const reply = await rawExchange(
        running.running.port,
        `CONNECT ${target} HTTP/1.1\r\nHost: ${target}\r\n\r\n`,
      )
      expect(reply.status, target).toBe(403)
      expect(reply.headers['x-cordon-egress-denied'], target).toBe('address-proxy-self')
    }
  })

  it('takes a new list whole, and refuses one that holds anything but addresses', async () => {
    running = await startProxy({ policy: { kind: 'allow-all' } })
    running.proxy.setHostAddresses([HOST_PUBLIC])
    expect(() => running!.proxy.setHostAddresses(['11.22.33.45', 'host.test'])).toThrow(TypeError)
    const kept = await rawExchange(
      running.running.port,
      `CONNECT ${HOST_PUBLIC}:80 HTTP/1.1\r\nHost: ${HOST_PUBLIC}:80\r\n\r\n`,
    )
    expect(kept.headers['x-cordon-egress-denied']).toBe('address-proxy-self')
    running.proxy.setHostAddresses(['11.22.33.45'])
    const replaced = await rawExchange(
      running.running.port,
      `CONNECT 11.22.33.45:80 HTTP/1.1\r\nHost: 11.22.33.45:80\r\n\r\n`,
    )
    expect(replaced.headers['x-cordon-egress-denied']).toBe('address-proxy-self')
  })
})
