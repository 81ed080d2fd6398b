/**
 * The reference's `EgressProxy` surface, as a namzu host wrote it: an
 * `allowedHosts` closure, `credentials`, `onDenied`, `listen(port)` and
 * `setAllowedHosts`. Each is proved through a real proxy and upstream.
 */
import { SandboxConfigValidationError, SandboxControlRefusedError } from '@cordon/core'
import { afterEach, describe, expect, it } from 'vitest'
import { EgressProxy, type RunningEgressProxy } from '../src/index.js'
import { fakeDns, openTunnel, rawExchange, startUpstream, type Upstream } from './helpers.js'

let running: RunningEgressProxy | undefined
let upstream: Upstream | undefined
afterEach(async () => {
  await running?.close()
  await upstream?.close()
  running = undefined
  upstream = undefined
})

const get = (port: number, host: string, upstreamPort: number) =>
  rawExchange(
    port,
    `GET http://${host}:${upstreamPort}/path HTTP/1.1\r\nHost: ${host}:${upstreamPort}\r\nConnection: close\r\n\r\n`,
  )

describe("EgressProxy in the reference's form", () => {
  it('asks allowedHosts on every request, reports denials to onDenied, and listens on 127.0.0.1 with listen(port)', async () => {
    upstream = await startUpstream()
    let allowed: readonly string[] = ['one.test']
    let asked = 0
    const denied: Array<[string, string]> = []
    const dns = fakeDns({ 'one.test': ['127.0.0.1'], 'two.test': ['127.0.0.1'] })
    const proxy = new EgressProxy({
      allowedHosts: async () => {
        asked++
        return allowed
      },
      onDenied: (host, reason) => denied.push([host, reason]),
      // cordon's own options mix in: the loopback upstream must be named to be reachable.
      allowInwardFor: ['one.test', 'two.test'],
      allowedPorts: [upstream.port],
      lookup: dns.lookup,
    })
    running = await proxy.listen(0)
    expect(running.url).toBe(`http://127.0.0.1:${running.port}`)
    expect((await get(running.port, 'one.test', upstream.port)).status).toBe(200)
    expect((await get(running.port, 'two.test', upstream.port)).status).toBe(403)
    expect(denied).toEqual([['two.test', 'host-not-allowed']])
    allowed = ['two.test']
    // The closure is asked again on the next request: no cached answer outlives a revocation.
    expect((await get(running.port, 'one.test', upstream.port)).status).toBe(403)
    expect((await get(running.port, 'two.test', upstream.port)).status).toBe(200)
    expect(asked).toBeGreaterThanOrEqual(4)
  })

  it('setAllowedHosts replaces the closure for requests that start afterwards', async () => {
    upstream = await startUpstream()
    const dns = fakeDns({ 'one.test': ['127.0.0.1'] })
    const proxy = new EgressProxy({
      allowedHosts: async () => [],
      allowInwardFor: ['one.test'],
      allowedPorts: [upstream.port],
      lookup: dns.lookup,
    })
    running = await proxy.listen(0)
    expect((await get(running.port, 'one.test', upstream.port)).status).toBe(403)
    running.setAllowedHosts(async () => ['one.test'])
    expect((await get(running.port, 'one.test', upstream.port)).status).toBe(200)
  })

  it('names the refused host in the body of its refusal, for a forwarded request and a tunnel', async () => {
    const denied: Array<[string, string]> = []
    const proxy = new EgressProxy({
      allowedHosts: async () => ['allowed.test'],
      onDenied: (host, reason) => denied.push([host, reason]),
    })
    running = await proxy.listen(0)
    const forwarded = await get(running.port, 'Evil.Example.NET', 8080)
    expect(forwarded.status).toBe(403)
    expect(forwarded.body).toBe('egress denied for evil.example.net:8080: host-not-allowed\n')
    const tunnel = await openTunnel(running.port, 'evil.example.net:443')
    expect(tunnel.response.status).toBe(403)
    expect(tunnel.response.body).toBe('egress denied for evil.example.net:443: host-not-allowed\n')
    tunnel.socket.destroy()
    const literal = await openTunnel(running.port, '[2001:db8::1]:443')
    expect(literal.response.body).toMatch(/^egress denied for \[2001:db8::1\]:443: /)
    literal.socket.destroy()
    expect(denied.slice(0, 2)).toEqual([
      ['evil.example.net', 'host-not-allowed'],
      ['evil.example.net', 'host-not-allowed'],
    ])
    // Refused before any destination was read: the reason alone.
    const garbled = await rawExchange(running.port, 'NOT HTTP AT ALL\r\n\r\n')
    expect(garbled.body).toBe('egress denied: bad-request\n')
  })

  it('takes credentials under their reference name and never sends one in clear', () => {
    const credentials = [{ host: 'api.test', header: 'authorization', value: 'Bearer real' }]
    expect(
      () => new EgressProxy({ allowedHosts: async () => ['api.test'], credentials }),
    ).not.toThrow()
    const refused = (() => {
      try {
        new EgressProxy({ allowedHosts: async () => [], credentials, upgradeToHttps: false })
      } catch (error) {
        return error
      }
    })()
    expect(SandboxControlRefusedError.isInstance(refused)).toBe(true)
    expect(refused).toMatchObject({ control: 'upgradeToHttps' })
    expect(
      () => new EgressProxy({ allowedHosts: async () => [], upgradeToHttps: false }),
    ).not.toThrow()
  })

  it('refuses two spellings of one setting, and unknown options', () => {
    const both = () =>
      new EgressProxy({ allowedHosts: async () => [], policy: { kind: 'allow-all' } })
    expect(both).toThrow(SandboxConfigValidationError)
    expect(both).toThrow(/allowedHosts or policy/)
    expect(
      () =>
        new EgressProxy({
          credentials: [],
          brokeredCredentials: [],
        }),
    ).toThrow(/credentials or brokeredCredentials/)
    expect(
      () =>
        new EgressProxy({ allowedHost: async () => [] } as unknown as ConstructorParameters<
          typeof EgressProxy
        >[0]),
    ).toThrow(/allowedHost/)
  })
})
