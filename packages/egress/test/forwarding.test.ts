/**
 * What the proxy lets through, and how: forwarding, tunnels, policies, per-client
 * registrations, limits and events, against loopback servers.
 */
import { spawn } from 'node:child_process'
import { mkdtemp, rm } from 'node:fs/promises'
import { connect, type Socket } from 'node:net'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { SandboxAbortedError, SandboxConfigValidationError } from '@cordon/core'
import { afterEach, describe, expect, it } from 'vitest'
import { EGRESS_DENIED_HEADER, EgressProxy, type EgressProxyOptions } from '../src/index.js'
import {
  fakeDns,
  openTunnel,
  rawExchange,
  readBytes,
  sleep,
  startEchoTcp,
  startProxy,
  startUpstream,
  type TestProxy,
} from './helpers.js'

const cleanups: (() => Promise<void>)[] = []
afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup()
})

async function upstreamServer(...args: Parameters<typeof startUpstream>) {
  const server = await startUpstream(...args)
  cleanups.push(() => server.close())
  return server
}

async function proxyWith(...args: Parameters<typeof startProxy>): Promise<TestProxy> {
  const proxy = await startProxy(...args)
  cleanups.push(() => proxy.close())
  return proxy
}

/** A loopback echo server, and the options that let a proxy tunnel to it as `echo.test`. */
async function echoTarget() {
  const echo = await startEchoTcp()
  cleanups.push(() => echo.close())
  const options: EgressProxyOptions = {
    policy: { kind: 'allow-all' },
    allowInwardFor: ['echo.test'],
    allowedPorts: [echo.port],
    lookup: fakeDns({ 'echo.test': ['127.0.0.1'] }).lookup,
  }
  return { echo, options }
}

describe('plain HTTP forwarding', () => {
  it('forwards to an allowed host, strips hop-by-hop headers both ways and reports one event', async () => {
    const upstream = await upstreamServer((_request, response) => {
      response.writeHead(200, {
        'content-type': 'text/plain',
        'content-length': 19,
        connection: 'x-hop',
        'x-hop': 'upstream-only',
        [EGRESS_DENIED_HEADER]: 'forged-by-upstream',
      })
      response.end('hello from upstream')
    })
    const dns = fakeDns({ 'upstream.test': ['127.0.0.1'] })
    const proxy = await proxyWith({
      policy: { kind: 'static', allowedHosts: ['upstream.test'] },
      allowInwardFor: ['upstream.test'],
      allowedPorts: [upstream.port],
      lookup: dns.lookup,
    })
    const response = await rawExchange(
      proxy.running.port,
      `GET http://UPSTREAM.test.:${upstream.port}/path?q=1 HTTP/1.1\r\n` +
        `Host: upstream.test:${upstream.port}\r\n` +
        'Connection: close, x-secret-hop\r\n' +
        'X-Secret-Hop: 1\r\nKeep-Alive: timeout=5\r\nProxy-Authorization: Basic eA==\r\n' +
        'TE: trailers\r\nUpgrade: h2c\r\nX-Kept: yes\r\n\r\n',
    )
    expect(response.status).toBe(200)
    expect(response.body).toBe('hello from upstream')
    expect(response.headers['x-hop']).toBeUndefined()
    expect(response.headers[EGRESS_DENIED_HEADER]).toBeUndefined()
    const [seen] = upstream.requests
    expect(seen?.url).toBe('/path?q=1')
    expect(seen?.headers.host).toBe(`upstream.test:${upstream.port}`)
    expect(seen?.headers['x-kept']).toBe('yes')
    for (const name of ['x-secret-hop', 'keep-alive', 'proxy-authorization', 'te', 'upgrade']) {
      expect(seen?.headers[name], name).toBeUndefined()
    }
    const event = await proxy.nextEvent()
    expect(event).toMatchObject({
      type: 'egress',
      kind: 'http',
      host: 'upstream.test',
      port: upstream.port,
      decision: 'allow',
      reason: 'allowed',
      address: '127.0.0.1',
      clientAddress: '127.0.0.1',
      status: 200,
      bytesDown: 'hello from upstream'.length,
    })
    expect(dns.calls).toEqual(['upstream.test'])
  })

  it('streams a chunked request body through and counts it', async () => {
    const upstream = await upstreamServer()
    const proxy = await proxyWith({
      policy: { kind: 'allow-all' },
      allowInwardFor: ['upstream.test'],
      allowedPorts: [upstream.port],
      lookup: fakeDns({ 'upstream.test': ['127.0.0.1'] }).lookup,
    })
    const response = await rawExchange(proxy.running.port, [
      `POST http://upstream.test:${upstream.port}/upload HTTP/1.1\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n`,
      '5\r\nhello\r\n',
      '6\r\n world\r\n0\r\n\r\n',
    ])
    expect(response.status).toBe(200)
    expect(upstream.requests[0]?.body).toBe('hello world')
    expect((await proxy.nextEvent()).bytesUp).toBe(11)
  })

  it('streams a large body both ways without changing a byte', async () => {
    const upstream = await upstreamServer((request, response) => {
      response.writeHead(200, { 'content-length': Buffer.byteLength(request.body) })
      response.end(request.body)
    })
    const proxy = await proxyWith({
      policy: { kind: 'allow-all' },
      allowInwardFor: ['upstream.test'],
      allowedPorts: [upstream.port],
      lookup: fakeDns({ 'upstream.test': ['127.0.0.1'] }).lookup,
    })
    const body = 'abcdefghij'.repeat(300_000)
    const response = await rawExchange(
      proxy.running.port,
      [
        `PUT http://upstream.test:${upstream.port}/big HTTP/1.1\r\nContent-Length: ${body.length}\r\nConnection: close\r\n\r\n`,
        body,
      ],
      { timeoutMs: 10_000 },
    )
    expect(response.status).toBe(200)
    expect(response.body.length).toBe(body.length)
    expect(response.body === body).toBe(true)
    expect(await proxy.nextEvent()).toMatchObject({ bytesUp: body.length, bytesDown: body.length })
  })

  it('sends 100 Continue only once the request is allowed', async () => {
    const upstream = await upstreamServer()
    const proxy = await proxyWith({
      policy: { kind: 'static', allowedHosts: ['upstream.test'] },
      allowInwardFor: ['upstream.test', 'other.test'],
      allowedPorts: [upstream.port],
      lookup: fakeDns({ 'upstream.test': ['127.0.0.1'], 'other.test': ['127.0.0.1'] }).lookup,
    })
    const head = (host: string) =>
      `POST http://${host}:${upstream.port}/ HTTP/1.1\r\nExpect: 100-continue\r\nContent-Length: 4\r\nConnection: close\r\n\r\n`
    const refused = await rawExchange(proxy.running.port, head('other.test'))
    expect(refused.raw.startsWith('HTTP/1.1 403')).toBe(true)
    expect(refused.raw).not.toContain('100 Continue')

    const socket = connect(proxy.running.port, '127.0.0.1')
    cleanups.push(async () => {
      socket.destroy()
    })
    socket.write(head('upstream.test'))
    expect((await readBytes(socket, 25)).toString()).toMatch(/^HTTP\/1\.1 100 Continue\r\n\r\n/)
    socket.write('body')
    const rest = await new Promise<string>((resolve) => {
      let text = ''
      socket.on('data', (chunk: Buffer) => {
        text += chunk.toString()
      })
      socket.on('close', () => resolve(text))
    })
    expect(rest).toContain('HTTP/1.1 200')
    expect(upstream.requests[0]?.body).toBe('body')
  })

  it('decides each request on a kept-alive connection on its own', async () => {
    const upstream = await upstreamServer()
    const proxy = await proxyWith({
      policy: { kind: 'static', allowedHosts: ['upstream.test'] },
      allowInwardFor: ['upstream.test', 'other.test'],
      allowedPorts: [upstream.port],
      lookup: fakeDns({ 'upstream.test': ['127.0.0.1'], 'other.test': ['127.0.0.1'] }).lookup,
    })
    const response = await rawExchange(proxy.running.port, [
      `GET http://upstream.test:${upstream.port}/one HTTP/1.1\r\n\r\n`,
      `GET http://other.test:${upstream.port}/two HTTP/1.1\r\n\r\n`,
    ])
    expect(response.raw).toContain('HTTP/1.1 200')
    expect(response.raw).toContain(`${EGRESS_DENIED_HEADER}: host-not-allowed`)
    expect(response.closed).toBe(true)
    expect(upstream.requests.map((request) => request.url)).toEqual(['/one'])
  })

  it('answers a client that half-closes right after its request, even when the upstream is slow', async () => {
    const upstream = await upstreamServer((_request, response) => {
      setTimeout(() => response.end('answered after the client shut its side'), 200)
    })
    const proxy = await proxyWith({
      policy: { kind: 'static', allowedHosts: ['slow.test'] },
      allowInwardFor: ['slow.test'],
      allowedPorts: [upstream.port],
      lookup: fakeDns({ 'slow.test': ['127.0.0.1'] }).lookup,
    })
    const reply = await new Promise<string>((resolve) => {
      const socket = connect({ port: proxy.running.port, host: '127.0.0.1', allowHalfOpen: true })
      let text = ''
      socket.on('data', (chunk: Buffer) => {
        text += chunk.toString()
      })
      socket.on('close', () => resolve(text))
      socket.end(
        `GET http://slow.test:${upstream.port}/ HTTP/1.1\r\nHost: slow.test:${upstream.port}\r\n\r\n`,
      )
    })
    expect(reply).toMatch(/^HTTP\/1\.1 200/)
    expect(reply).toContain('answered after the client shut its side')
  })

  it('answers 502 connect-failed when an allowed destination refuses the connection', async () => {
    const closed = await upstreamServer()
    await closed.close()
    const proxy = await proxyWith({
      policy: { kind: 'allow-all' },
      allowInwardFor: ['gone.test'],
      allowedPorts: [closed.port],
      lookup: fakeDns({ 'gone.test': ['127.0.0.1'] }).lookup,
    })
    const response = await rawExchange(
      proxy.running.port,
      `GET http://gone.test:${closed.port}/ HTTP/1.1\r\n\r\n`,
    )
    expect(response.status).toBe(502)
    expect(response.headers[EGRESS_DENIED_HEADER]).toBe('connect-failed')
    expect(response.closed).toBe(true)
    const tunnel = await openTunnel(proxy.running.port, `gone.test:${closed.port}`)
    expect(tunnel.response.status).toBe(502)
    expect(tunnel.response.headers[EGRESS_DENIED_HEADER]).toBe('connect-failed')
  })
})

describe('connect timeout', () => {
  it('answers 504 connect-timeout when the upstream never completes the handshake', async () => {
    // A listener in another process whose event loop is blocked: once its
    // accept queue is full the kernel drops further SYNs, so a connect hangs.
    const child = spawn(
      process.execPath,
      [
        '-e',
        `const s = require('node:net').createServer();
         s.listen({ host: '127.0.0.1', port: 0, backlog: 1 }, () => {
           console.log(s.address().port);
           Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, 15000);
         });`,
      ],
      { stdio: ['ignore', 'pipe', 'inherit'] },
    )
    cleanups.push(async () => {
      child.kill('SIGKILL')
    })
    const port = await new Promise<number>((resolve) =>
      child.stdout?.once('data', (chunk: Buffer) => resolve(Number(chunk.toString().trim()))),
    )
    const fillers = Array.from({ length: 8 }, () =>
      connect(port, '127.0.0.1').on('error', () => {}),
    )
    cleanups.push(async () => {
      for (const filler of fillers) filler.destroy()
    })
    await sleep(200)
    const proxy = await proxyWith({
      policy: { kind: 'allow-all' },
      allowInwardFor: ['stuck.test'],
      allowedPorts: [port],
      lookup: fakeDns({ 'stuck.test': ['127.0.0.1'] }).lookup,
      limits: { connectTimeoutMs: 300 },
    })
    const tunnel = await openTunnel(proxy.running.port, `stuck.test:${port}`)
    expect(tunnel.response.status).toBe(504)
    expect(tunnel.response.headers[EGRESS_DENIED_HEADER]).toBe('connect-timeout')
    const forwarded = await rawExchange(
      proxy.running.port,
      `GET http://stuck.test:${port}/ HTTP/1.1\r\n\r\n`,
    )
    expect(forwarded.status).toBe(504)
    expect(forwarded.headers[EGRESS_DENIED_HEADER]).toBe('connect-timeout')
  })
})

describe('CONNECT tunnels', () => {
  it('relays bytes both ways only after the checks, then reports bytes and duration', async () => {
    const echo = await startEchoTcp()
    cleanups.push(() => echo.close())
    const proxy = await proxyWith({
      policy: { kind: 'static', allowedHosts: ['.echo.test'] },
      allowInwardFor: ['.echo.test'],
      allowedPorts: [echo.port],
      lookup: fakeDns({ 'svc.echo.test': ['127.0.0.1'] }).lookup,
    })
    const { response, socket } = await openTunnel(proxy.running.port, `svc.echo.test:${echo.port}`)
    expect(response.status).toBe(200)
    socket.write('ping-1234')
    expect((await readBytes(socket, 9)).toString()).toBe('ping-1234')
    socket.end()
    const event = await proxy.nextEvent((candidate) => candidate.kind === 'connect')
    expect(event).toMatchObject({
      kind: 'connect',
      host: 'svc.echo.test',
      port: echo.port,
      decision: 'allow',
      reason: 'allowed',
      address: '127.0.0.1',
      bytesUp: 9,
      bytesDown: 9,
    })
    expect(event.durationMs).toBeGreaterThanOrEqual(0)
    expect(proxy.proxy.activeTunnels).toBe(0)
  })

  it('relays bytes the client sent right behind the CONNECT request', async () => {
    const { echo, options } = await echoTarget()
    const proxy = await proxyWith(options)
    const response = await rawExchange(
      proxy.running.port,
      `CONNECT echo.test:${echo.port} HTTP/1.1\r\nHost: echo.test:${echo.port}\r\n\r\nearly-bytes`,
      { timeoutMs: 500 },
    )
    expect(response.raw).toBe('HTTP/1.1 200 Connection Established\r\n\r\nearly-bytes')
  })

  it('closes a tunnel that stays idle past the idle timeout', async () => {
    const { echo, options } = await echoTarget()
    const proxy = await proxyWith({ ...options, limits: { idleTimeoutMs: 150 } })
    const { socket } = await openTunnel(proxy.running.port, `echo.test:${echo.port}`)
    const closed = new Promise<void>((resolve) => socket.once('close', () => resolve()))
    await Promise.race([
      closed,
      sleep(3_000).then(() => Promise.reject(new Error('tunnel not closed'))),
    ])
    expect((await proxy.nextEvent()).error).toBe('idle timeout')
  })

  it("answers a connection past a client socket's share with 503, and serves it again once one closes", async () => {
    const upstream = await upstreamServer((_request, response) => response.end('ok'))
    const proxy = await proxyWith({
      policy: { kind: 'deny-all' },
      allowInwardFor: ['upstream.test'],
      allowedPorts: [upstream.port],
      lookup: fakeDns({ 'upstream.test': ['127.0.0.1'] }).lookup,
      limits: { maxConnectionsPerClient: 2 },
    })
    const directory = await mkdtemp(join(tmpdir(), 'cordon-egress-'))
    cleanups.push(() => rm(directory, { recursive: true, force: true }))
    const path = join(directory, 'client.sock')
    const clientAddress = 'fd00::7'
    const listener = await proxy.proxy.listenForClient(path, clientAddress)
    cleanups.push(() => listener.close())
    proxy.proxy.setClientPolicy(clientAddress, {
      clientId: 'sbx_limited',
      policy: { kind: 'static', allowedHosts: ['upstream.test'] },
    })
    const request = `GET http://upstream.test:${upstream.port}/ HTTP/1.1\r\nConnection: close\r\n\r\n`

    // Two idle connections hold the client's whole share.
    const held = await Promise.all(
      [1, 2].map(
        () =>
          new Promise<Socket>((resolve, reject) => {
            const socket = connect({ path }, () => resolve(socket))
            socket.once('error', reject)
            cleanups.push(async () => void socket.destroy())
          }),
      ),
    )
    const refused = await rawExchange(0, request, { path })
    expect(refused.status).toBe(503)
    expect(refused.headers[EGRESS_DENIED_HEADER]).toBe('too-many-connections')
    expect(refused.closed).toBe(true)
    expect(await proxy.nextEvent((event) => event.reason === 'too-many-connections')).toMatchObject(
      { decision: 'deny', clientAddress, status: 503 },
    )
    expect(upstream.requests).toHaveLength(0)

    const closed = new Promise((resolve) => held[0]!.once('close', resolve))
    held[0]!.destroy()
    await closed
    // The proxy counts the slot free once it has seen the close: asked again
    // until it has (at once on an idle machine).
    let served = await rawExchange(0, request, { path })
    for (let tries = 0; served.status !== 200 && tries < 50; tries++) {
      await sleep(100)
      served = await rawExchange(0, request, { path })
    }
    expect(served.status).toBe(200)
    expect(served.body).toBe('ok')
  })

  it('closes a TCP connection past maxClientConnections unanswered (the documented exception)', async () => {
    const proxy = await proxyWith({
      policy: { kind: 'deny-all' },
      limits: { maxClientConnections: 1 },
    })
    const held = await new Promise<Socket>((resolve, reject) => {
      const socket = connect({ port: proxy.running.port, host: '127.0.0.1' }, () => resolve(socket))
      socket.once('error', reject)
      cleanups.push(async () => void socket.destroy())
    })
    await sleep(50)
    const dropped = await rawExchange(
      proxy.running.port,
      'GET http://a.test/ HTTP/1.1\r\nConnection: close\r\n\r\n',
    )
    expect(dropped.raw).toBe('')
    expect(dropped.status).toBe(0)
    held.destroy()
  })

  it('bounds tunnels globally and per client', async () => {
    const { echo, options } = await echoTarget()
    const global = await proxyWith({ ...options, limits: { maxTunnels: 1 } })
    const first = await openTunnel(global.running.port, `echo.test:${echo.port}`)
    expect(first.response.status).toBe(200)
    const second = await openTunnel(global.running.port, `echo.test:${echo.port}`, {
      localAddress: '127.0.0.2',
    })
    expect(second.response.status).toBe(503)
    expect(second.response.headers[EGRESS_DENIED_HEADER]).toBe('too-many-tunnels')
    first.socket.destroy()

    const perClient = await proxyWith({
      ...options,
      limits: { maxTunnels: 10, maxTunnelsPerClient: 1 },
    })
    const a1 = await openTunnel(perClient.running.port, `echo.test:${echo.port}`)
    const a2 = await openTunnel(perClient.running.port, `echo.test:${echo.port}`)
    const b1 = await openTunnel(perClient.running.port, `echo.test:${echo.port}`, {
      localAddress: '127.0.0.2',
    })
    expect([a1.response.status, a2.response.status, b1.response.status]).toEqual([200, 503, 200])
    for (const tunnel of [a1, a2, b1]) tunnel.socket.destroy()
  })

  it("reuses upstream read buffers without one tunnel ever receiving another tunnel's bytes", async () => {
    const { echo, options } = await echoTarget()
    const proxy = await proxyWith(options)
    // Waves of concurrent tunnels, each echoing 12 MiB of its own byte value
    // (many reads of a 64 KiB buffer). Each client stops reading for a while,
    // so the proxy's writes to it queue (a queued write still points into
    // the read buffer) while the other tunnels read; in each wave half the
    // clients then hang up, so their buffers go back mid-transfer and the
    // next wave's tunnels take them. A build that hands every tunnel the
    // same buffer failed this in 4 of 6 runs with three waves; six are run.
    const bytes = 12 * 1024 * 1024
    let value = 0
    for (let wave = 0; wave < 6; wave += 1) {
      const tunnels = await Promise.all(
        Array.from({ length: 6 }, async (_, index) => {
          value = (value % 250) + 1
          const own = value
          const tunnel = await openTunnel(proxy.running.port, `echo.test:${echo.port}`)
          expect(tunnel.response.status).toBe(200)
          tunnel.socket.pause()
          return { ...tunnel, own, quits: index % 2 === 1 }
        }),
      )
      await Promise.all(
        tunnels.map(async ({ socket, own, quits }) => {
          socket.write(Buffer.alloc(bytes, own))
          await sleep(150)
          if (quits) {
            socket.destroy()
            return
          }
          const chunks: Buffer[] = []
          let count = 0
          const received = await new Promise<Buffer>((resolve, reject) => {
            const timer = setTimeout(() => reject(new Error(`${count} of ${bytes} bytes`)), 15_000)
            socket.on('data', (chunk: Buffer) => {
              chunks.push(chunk)
              count += chunk.length
              if (count < bytes) return
              clearTimeout(timer)
              resolve(Buffer.concat(chunks))
            })
            socket.resume()
          })
          expect(received.equals(Buffer.alloc(bytes, own))).toBe(true)
          socket.destroy()
        }),
      )
    }
    // Every tunnel's teardown ran (each reports once both sides closed).
    for (let waited = 0; proxy.proxy.activeTunnels > 0 && waited < 3_000; waited += 20)
      await sleep(20)
    expect(proxy.proxy.activeTunnels).toBe(0)
  })

  it('ends every open tunnel when the proxy closes', async () => {
    const { echo, options } = await echoTarget()
    const proxy = await startProxy(options)
    const { socket } = await openTunnel(proxy.running.port, `echo.test:${echo.port}`)
    const closed = new Promise<void>((resolve) => socket.once('close', () => resolve()))
    await proxy.close()
    await Promise.race([
      closed,
      sleep(3_000).then(() => Promise.reject(new Error('tunnel survived close'))),
    ])
    await proxy.close()
  })
})

describe('DNS pinning', () => {
  it('looks each request up once and dials exactly the address it screened', async () => {
    // Two servers on the same port number, so only the address tells them apart.
    const a = await upstreamServer(undefined, '127.0.0.1')
    const b = await upstreamServer(undefined, '::1', a.port)
    // Each lookup flips the answer. A proxy that looked the name up again to
    // connect would land every request on the other server.
    let flips = 0
    const dns = fakeDns({ 'flip.test': () => (flips++ % 2 === 0 ? ['127.0.0.1'] : ['::1']) })
    const proxy = await proxyWith({
      policy: { kind: 'allow-all' },
      allowInwardFor: ['flip.test'],
      allowedPorts: [a.port],
      lookup: dns.lookup,
    })
    for (const round of [1, 2, 3, 4]) {
      await rawExchange(
        proxy.running.port,
        `GET http://flip.test:${a.port}/round-${round} HTTP/1.1\r\nConnection: close\r\n\r\n`,
      )
    }
    expect(dns.calls).toHaveLength(4)
    expect(proxy.events.map((event) => event.address)).toEqual([
      '127.0.0.1',
      '::1',
      '127.0.0.1',
      '::1',
    ])
    expect(a.requests.map((request) => request.url)).toEqual(['/round-1', '/round-3'])
    expect(b.requests.map((request) => request.url)).toEqual(['/round-2', '/round-4'])
  })

  it('screens every lookup afresh: an answer that flips to a forbidden address is refused', async () => {
    const upstream = await upstreamServer()
    let calls = 0
    const dns = fakeDns({ 'rebind.test': () => (calls++ === 0 ? ['127.0.0.1'] : ['240.0.0.1']) })
    const proxy = await proxyWith({
      policy: { kind: 'allow-all' },
      allowInwardFor: ['rebind.test'],
      allowedPorts: [upstream.port],
      lookup: dns.lookup,
    })
    const first = await rawExchange(
      proxy.running.port,
      `GET http://rebind.test:${upstream.port}/ HTTP/1.1\r\nConnection: close\r\n\r\n`,
    )
    const second = await rawExchange(
      proxy.running.port,
      `GET http://rebind.test:${upstream.port}/ HTTP/1.1\r\nConnection: close\r\n\r\n`,
    )
    expect(first.status).toBe(200)
    expect(second.status).toBe(403)
    expect(second.headers[EGRESS_DENIED_HEADER]).toBe('address-reserved')
    expect(upstream.requests).toHaveLength(1)
    expect(dns.calls).toEqual(['rebind.test', 'rebind.test'])
  })

  it('uses the system resolver by default, and screens what it returns', async () => {
    const proxy = await proxyWith({ policy: { kind: 'allow-all' } })
    const tunnel = await openTunnel(proxy.running.port, 'localhost:443')
    expect(tunnel.response.headers[EGRESS_DENIED_HEADER]).toBe('address-loopback')
  })
})

describe('policies', () => {
  it('denies everything by default, without a lookup', async () => {
    const dns = fakeDns({ 'a.test': ['127.0.0.1'] })
    const proxy = await proxyWith({ lookup: dns.lookup })
    const tunnel = await openTunnel(proxy.running.port, 'a.test:443')
    expect(tunnel.response.status).toBe(403)
    expect(tunnel.response.headers[EGRESS_DENIED_HEADER]).toBe('policy-deny-all')
    expect(dns.calls).toEqual([])
  })

  it('applies a resolver policy and denies when the resolver fails', async () => {
    const upstream = await upstreamServer()
    let fail = false
    const proxy = await proxyWith({
      policy: {
        kind: 'resolver',
        resolve: async () => {
          if (fail) throw new Error('policy service down')
          return ['upstream.test']
        },
      },
      resolverCacheTtlMs: 0,
      allowInwardFor: ['upstream.test'],
      allowedPorts: [upstream.port],
      lookup: fakeDns({ 'upstream.test': ['127.0.0.1'], 'other.test': ['127.0.0.1'] }).lookup,
    })
    const request = (host: string) =>
      rawExchange(
        proxy.running.port,
        `GET http://${host}:${upstream.port}/ HTTP/1.1\r\nConnection: close\r\n\r\n`,
      )
    expect((await request('upstream.test')).status).toBe(200)
    expect((await request('other.test')).headers[EGRESS_DENIED_HEADER]).toBe('host-not-allowed')
    fail = true
    expect((await request('upstream.test')).headers[EGRESS_DENIED_HEADER]).toBe('resolver-failed')
  })

  it('setPolicy applies to new connections and leaves open tunnels alone', async () => {
    const { echo, options } = await echoTarget()
    const proxy = await proxyWith({
      ...options,
      policy: { kind: 'static', allowedHosts: ['echo.test'] },
    })
    const open = await openTunnel(proxy.running.port, `echo.test:${echo.port}`)
    expect(open.response.status).toBe(200)
    proxy.proxy.setPolicy({ kind: 'deny-all' })
    const refused = await openTunnel(proxy.running.port, `echo.test:${echo.port}`)
    expect(refused.response.headers[EGRESS_DENIED_HEADER]).toBe('policy-deny-all')
    open.socket.write('still-open')
    expect((await readBytes(open.socket, 10)).toString()).toBe('still-open')
    open.socket.destroy()
    expect(() => proxy.proxy.setPolicy({ kind: 'static', allowedHosts: ['*.bad'] })).toThrow(
      SandboxConfigValidationError,
    )
  })

  it('keeps one policy per client source address and labels events with the client', async () => {
    const upstream = await upstreamServer()
    const proxy = await proxyWith({
      policy: { kind: 'allow-all' },
      requireClientPolicy: true,
      allowInwardFor: ['upstream.test', 'other.test'],
      allowedPorts: [upstream.port],
      lookup: fakeDns({ 'upstream.test': ['127.0.0.1'], 'other.test': ['127.0.0.1'] }).lookup,
    })
    const sandboxId = 'sbx_abcdefghijklmnopqrstuvwxyz'
    proxy.proxy.setClientPolicy('::ffff:127.0.0.2', {
      clientId: sandboxId,
      policy: { kind: 'static', allowedHosts: ['upstream.test'] },
    })
    proxy.proxy.setClientPolicy('127.0.0.3', {
      clientId: 'tenant-b',
      policy: { kind: 'static', allowedHosts: ['other.test'] },
    })
    const from = (localAddress: string, host: string) =>
      rawExchange(
        proxy.running.port,
        `GET http://${host}:${upstream.port}/ HTTP/1.1\r\nConnection: close\r\n\r\n`,
        {
          localAddress,
        },
      )

    const unknown = await from('127.0.0.1', 'upstream.test')
    expect(unknown.status).toBe(403)
    expect(unknown.headers[EGRESS_DENIED_HEADER]).toBe('client-unknown')
    expect((await from('127.0.0.2', 'upstream.test')).status).toBe(200)
    expect(proxy.events.at(-1)).toMatchObject({
      clientAddress: '127.0.0.2',
      clientId: sandboxId,
      sandboxId,
    })
    expect((await from('127.0.0.2', 'other.test')).headers[EGRESS_DENIED_HEADER]).toBe(
      'host-not-allowed',
    )
    expect((await from('127.0.0.3', 'other.test')).status).toBe(200)
    expect(proxy.events.at(-1)).toMatchObject({ clientAddress: '127.0.0.3', clientId: 'tenant-b' })
    expect(proxy.events.at(-1)?.sandboxId).toBeUndefined()

    expect(proxy.proxy.removeClient('127.0.0.2')).toBe(true)
    expect((await from('127.0.0.2', 'upstream.test')).headers[EGRESS_DENIED_HEADER]).toBe(
      'client-unknown',
    )
    expect(() =>
      proxy.proxy.setClientPolicy('not-an-ip', { clientId: '', policy: { kind: 'deny-all' } }),
    ).toThrow(/clientAddress[\s\S]*clientId/)
  })
})

describe('construction and lifecycle', () => {
  it('reports every invalid option at once and does no I/O', () => {
    let error: unknown
    try {
      new EgressProxy({
        policy: { kind: 'static', allowedHosts: ['*.example.com', 'ok.example.com'] },
        allowInwardFor: ['127.0.0.1', 'db.internal'],
        allowedPorts: [0, 443],
        limits: { maxTunnels: -1 },
        brokeredCredentials: [
          { host: 'api.example.com', header: 'authorization', value: 'a' },
          { host: 'api.example.com', header: 'Authorization', value: 'b' },
        ],
        // @ts-expect-error an unknown option is refused, not ignored
        allowedHost: ['typo'],
      })
    } catch (caught) {
      error = caught
    }
    expect(SandboxConfigValidationError.isInstance(error)).toBe(true)
    const paths = (error as SandboxConfigValidationError).issues.map((issue) => issue.path)
    expect(paths).toEqual(
      expect.arrayContaining([
        'policy.allowedHosts.0',
        'allowInwardFor.0',
        'allowedPorts.0',
        'limits.maxTunnels',
        'brokeredCredentials.1.header',
        '',
      ]),
    )
  })

  it('refuses to listen with an aborted signal, and a listener that throws does not break the proxy', async () => {
    const controller = new AbortController()
    controller.abort('stop')
    await expect(new EgressProxy().listen({ signal: controller.signal })).rejects.toSatisfy(
      SandboxAbortedError.isInstance,
    )
    const proxy = await proxyWith({
      onDecision: () => {
        throw new Error('listener bug')
      },
    })
    const tunnel = await openTunnel(proxy.running.port, 'a.test:443')
    expect(tunnel.response.headers[EGRESS_DENIED_HEADER]).toBe('policy-deny-all')
    expect(proxy.running.url).toBe(`http://127.0.0.1:${proxy.running.port}`)
  })
})
