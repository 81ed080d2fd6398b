/**
 * Test parts: loopback upstreams, a DNS stand-in the test drives, a proxy
 * that records its decisions, and a raw HTTP client that sends exactly the
 * bytes a test writes (so malformed requests reach the proxy unrepaired).
 */
import { execFileSync } from 'node:child_process'
import { mkdtempSync, readFileSync, rmSync } from 'node:fs'
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http'
import { createServer as createHttpsServer } from 'node:https'
import { connect, createServer as createTcpServer, type Socket } from 'node:net'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import {
  type EgressDecisionEvent,
  EgressProxy,
  type EgressProxyOptions,
  type LookupAnswer,
  type RunningEgressProxy,
} from '../src/index.js'

export interface RecordedRequest {
  readonly method: string
  readonly url: string
  readonly headers: IncomingMessage['headers']
  readonly rawHeaders: readonly string[]
  readonly body: string
}

export interface Upstream {
  readonly port: number
  readonly requests: RecordedRequest[]
  close(): Promise<void>
}

type Handler = (request: RecordedRequest, response: ServerResponse) => void

const echo: Handler = (request, response) => {
  const text = JSON.stringify(request)
  response.writeHead(200, { 'content-type': 'application/json', 'x-upstream': 'yes' })
  response.end(text)
}

function serve(server: Server, handler: Handler, host: string, port = 0): Promise<Upstream> {
  const requests: RecordedRequest[] = []
  server.on('request', (request: IncomingMessage, response: ServerResponse) => {
    const chunks: Buffer[] = []
    request.on('data', (chunk: Buffer) => chunks.push(chunk))
    request.on('end', () => {
      const recorded: RecordedRequest = {
        method: request.method ?? '',
        url: request.url ?? '',
        headers: request.headers,
        rawHeaders: request.rawHeaders,
        body: Buffer.concat(chunks).toString('utf8'),
      }
      requests.push(recorded)
      handler(recorded, response)
    })
  })
  return new Promise((resolve) => {
    server.listen(port, host, () => {
      const address = server.address()
      resolve({
        port: typeof address === 'object' && address !== null ? address.port : 0,
        requests,
        close: () =>
          new Promise<void>((done) => {
            server.closeAllConnections()
            server.close(() => done())
          }),
      })
    })
  })
}

/** A plain HTTP server on loopback that echoes each request as JSON. */
export function startUpstream(
  handler: Handler = echo,
  host = '127.0.0.1',
  port = 0,
): Promise<Upstream> {
  return serve(createServer(), handler, host, port)
}

export function startHttpsUpstream(
  tls: TestCertificate,
  handler: Handler = echo,
): Promise<Upstream> {
  return serve(createHttpsServer({ cert: tls.cert, key: tls.key }), handler, '127.0.0.1')
}

/** A TCP server that echoes bytes back, for tunnel tests. */
export function startEchoTcp(): Promise<{ port: number; close(): Promise<void> }> {
  const sockets = new Set<Socket>()
  const server = createTcpServer((socket: Socket) => {
    sockets.add(socket)
    socket.on('close', () => sockets.delete(socket))
    socket.on('error', () => {})
    socket.pipe(socket)
  })
  return new Promise((resolve) => {
    server.listen(0, '127.0.0.1', () => {
      const address = server.address()
      resolve({
        port: typeof address === 'object' && address !== null ? address.port : 0,
        close: () =>
          new Promise<void>((done) => {
            for (const socket of sockets) socket.destroy()
            server.close(() => done())
          }),
      })
    })
  })
}

export type DnsRecord = readonly string[] | (() => readonly string[]) | 'hang' | 'fail'

/** A DNS stand-in: answers from a table the test controls, and counts lookups. */
export function fakeDns(table: Record<string, DnsRecord>) {
  const calls: string[] = []
  const lookup = async (hostname: string): Promise<LookupAnswer[]> => {
    calls.push(hostname)
    const record = table[hostname]
    if (record === undefined || record === 'fail')
      throw Object.assign(new Error('ENOTFOUND'), { code: 'ENOTFOUND' })
    if (record === 'hang') return new Promise<LookupAnswer[]>(() => {})
    const addresses = typeof record === 'function' ? record() : record
    return addresses.map((address) => ({ address, family: address.includes(':') ? 6 : 4 }))
  }
  return { lookup, calls, table }
}

export interface TestProxy {
  readonly proxy: EgressProxy
  readonly running: RunningEgressProxy
  readonly events: EgressDecisionEvent[]
  /** Resolves with the next event that matches, within a bounded wait. */
  nextEvent(predicate?: (event: EgressDecisionEvent) => boolean): Promise<EgressDecisionEvent>
  close(): Promise<void>
}

export async function startProxy(options: EgressProxyOptions, port = 0): Promise<TestProxy> {
  const events: EgressDecisionEvent[] = []
  const proxy = new EgressProxy({
    ...options,
    onDecision: (event) => {
      events.push(event)
      options.onDecision?.(event)
    },
  })
  const running = await proxy.listen({ host: '127.0.0.1', port })
  let seen = 0
  return {
    proxy,
    running,
    events,
    async nextEvent(predicate = () => true) {
      for (let attempt = 0; attempt < 200; attempt += 1) {
        const index = events.findIndex((event, position) => position >= seen && predicate(event))
        if (index !== -1) {
          seen = index + 1
          return events[index]!
        }
        await sleep(10)
      }
      throw new Error(`no matching decision event; saw ${JSON.stringify(events)}`)
    },
    close: () => running.close(),
  }
}

export function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms))
}

export interface RawResponse {
  readonly status: number
  readonly headers: Record<string, string>
  readonly body: string
  readonly raw: string
  /** The connection was closed by the proxy (not by the test's time bound). */
  readonly closed: boolean
}

export function parseResponse(raw: string, closed: boolean): RawResponse {
  const end = raw.indexOf('\r\n\r\n')
  const head = end === -1 ? raw : raw.slice(0, end)
  const [statusLine = '', ...lines] = head.split('\r\n')
  const headers: Record<string, string> = {}
  for (const line of lines) {
    const colon = line.indexOf(':')
    if (colon > 0) headers[line.slice(0, colon).trim().toLowerCase()] = line.slice(colon + 1).trim()
  }
  return {
    status: Number(statusLine.split(' ')[1] ?? 0),
    headers,
    body: end === -1 ? '' : raw.slice(end + 4),
    raw,
    closed,
  }
}

/**
 * Sends `payload` byte for byte and collects everything until the proxy
 * closes the connection or `timeoutMs` passes (every wait is bounded).
 */
export function rawExchange(
  port: number,
  payload: string | readonly (string | Buffer)[],
  /** `path`: a unix socket (a `listenForClient` socket) instead of `port`. */
  options: { timeoutMs?: number; localAddress?: string; host?: string; path?: string } = {},
): Promise<RawResponse> {
  return new Promise((resolve) => {
    const chunks: Buffer[] = []
    const socket =
      options.path === undefined
        ? connect({ port, host: options.host ?? '127.0.0.1', localAddress: options.localAddress })
        : connect({ path: options.path })
    let closedByPeer = false
    const timer = setTimeout(() => socket.destroy(), options.timeoutMs ?? 3_000)
    socket.on('connect', () => {
      const parts = typeof payload === 'string' ? [payload] : payload
      for (const part of parts) socket.write(part)
    })
    socket.on('data', (chunk: Buffer) => chunks.push(chunk))
    socket.on('end', () => {
      closedByPeer = true
    })
    socket.on('error', () => {})
    socket.on('close', () => {
      clearTimeout(timer)
      resolve(parseResponse(Buffer.concat(chunks).toString('utf8'), closedByPeer))
    })
  })
}

/** Opens a CONNECT tunnel and returns the response head and the socket, still open on success. */
export function openTunnel(
  port: number,
  authority: string,
  options: { headers?: string; localAddress?: string; timeoutMs?: number } = {},
): Promise<{ response: RawResponse; socket: Socket }> {
  return new Promise((resolve, reject) => {
    const socket = connect({ port, host: '127.0.0.1', localAddress: options.localAddress })
    let buffer = Buffer.alloc(0)
    const timer = setTimeout(() => {
      socket.destroy()
      reject(new Error('no CONNECT response in time'))
    }, options.timeoutMs ?? 3_000)
    socket.on('error', () => {})
    socket.on('connect', () => {
      const host = options.headers ?? `Host: ${authority}\r\n`
      socket.write(`CONNECT ${authority} HTTP/1.1\r\n${host}\r\n`)
    })
    const onData = (chunk: Buffer): void => {
      buffer = Buffer.concat([buffer, chunk])
      const end = buffer.indexOf('\r\n\r\n')
      if (end === -1) return
      const head = parseResponse(buffer.toString('utf8'), false)
      if (head.status !== 200) return
      clearTimeout(timer)
      socket.off('data', onData)
      resolve({ response: head, socket })
    }
    socket.on('data', onData)
    socket.on('close', () => {
      clearTimeout(timer)
      resolve({ response: parseResponse(buffer.toString('utf8'), true), socket })
    })
  })
}

/** Reads from a socket until `length` bytes arrived (bounded). */
export function readBytes(socket: Socket, length: number, timeoutMs = 3_000): Promise<Buffer> {
  return new Promise((resolve, reject) => {
    let buffer = Buffer.alloc(0)
    const timer = setTimeout(() => {
      socket.off('data', onData)
      reject(new Error(`only ${buffer.length} of ${length} bytes in time`))
    }, timeoutMs)
    const onData = (chunk: Buffer): void => {
      buffer = Buffer.concat([buffer, chunk])
      if (buffer.length >= length) {
        clearTimeout(timer)
        socket.off('data', onData)
        resolve(buffer)
      }
    }
    socket.on('data', onData)
  })
}

export interface TestCertificate {
  readonly cert: string
  readonly key: string
}

/**
 * A self-signed certificate for the brokered-host names used in tests, made
 * with the openssl CLI. The tests need it; a machine without openssl fails
 * here loudly rather than skipping.
 */
export function makeCertificate(names: readonly string[]): TestCertificate {
  const dir = mkdtempSync(join(tmpdir(), 'cordon-egress-cert-'))
  try {
    const san = [...names.map((name) => `DNS:${name}`), 'IP:127.0.0.1'].join(',')
    execFileSync(
      'openssl',
      [
        'req',
        '-x509',
        '-newkey',
        'ec',
        '-pkeyopt',
        'ec_paramgen_curve:prime256v1',
        '-nodes',
        '-keyout',
        join(dir, 'key.pem'),
        '-out',
        join(dir, 'cert.pem'),
        '-days',
        '2',
        '-subj',
        '/CN=cordon-egress-test',
        '-addext',
        `subjectAltName=${san}`,
      ],
      { stdio: 'pipe', timeout: 20_000 },
    )
    return {
      cert: readFileSync(join(dir, 'cert.pem'), 'utf8'),
      key: readFileSync(join(dir, 'key.pem'), 'utf8'),
    }
  } finally {
    rmSync(dir, { recursive: true, force: true })
  }
}
