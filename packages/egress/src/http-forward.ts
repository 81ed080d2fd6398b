/**
 * Plain-HTTP forwarding (`GET http://host/path` sent to the proxy).
 *
 * The absolute-URI authority is the policy subject; a `Host` header that
 * disagrees with it is refused, so the upstream cannot be steered by a header
 * the policy never saw. Framing is normalised: a request with both
 * `Content-Length` and `Transfer-Encoding`, or any transfer coding other than
 * `chunked`, is refused (Node's parser refuses most of these before they get
 * here; the check repeats it so the guarantee does not hang on a parser
 * setting), and hop-by-hop headers never cross. The upstream leg goes through
 * undici, dialling only the screened addresses. For a host with a brokered
 * credential the upstream leg is HTTPS whatever the client spoke.
 */
import type { IncomingMessage, ServerResponse } from 'node:http'
import { PassThrough, pipeline, type Readable, type Transform } from 'node:stream'
import type { EgressReasonCode } from '@cordon/core'
import { Client } from 'undici'
import { admit } from './admission.js'
import {
  checkHostHeaders,
  normalizeTargetHost,
  parseAuthority,
  policySubject,
  type TargetHost,
} from './authority.js'
import {
  CredentialBroker,
  type HeaderList,
  maskSecrets,
  PlaceholderMisdirectedError,
  placeholderScanner,
  secretRedactor,
} from './credential-broker.js'
import {
  denialBody,
  EGRESS_DENIED_HEADER,
  type RefusedDestination,
  statusForReason,
} from './denial.js'
import { exchangeClient } from './exchange-client.js'
import { DialError, pinnedConnector } from './pinned-dial.js'
import type { ProxyRuntime } from './proxy-runtime.js'

/** Headers that describe one connection, never the message (RFC 9110 §7.6.1), plus proxy-only ones. */
const HOP_BY_HOP = new Set([
  'connection',
  'keep-alive',
  'proxy-connection',
  'proxy-authenticate',
  'proxy-authorization',
  'te',
  'trailer',
  'transfer-encoding',
  'upgrade',
  'http2-settings',
  // The proxy answered any `100-continue` itself; undici refuses to send it on.
  'expect',
  'host',
])

const ABSOLUTE_HTTP = /^http:\/\/([^/?#]*)([^#]*)$/i

/**
 * Connections the proxy has answered with a refusal and will close. Requests
 * the client pipelined behind the refused one are dropped unanswered: after
 * a framing refusal, where one request ends is exactly what is in doubt.
 */
const refusedConnections = new WeakSet<object>()

export async function handleRequest(
  runtime: ProxyRuntime,
  request: IncomingMessage,
  response: ServerResponse,
  /** The client sent `Expect: 100-continue`: it holds its body back until told to go on. */
  expectsContinue = false,
): Promise<void> {
  if (refusedConnections.has(request.socket)) return
  const exchange = exchangeClient(runtime, 'http', request.socket.remoteAddress)
  const { clientAddress, found } = exchange
  let host = ''
  let port = 0
  const deny = (reason: EgressReasonCode, address?: string): void => {
    exchange.report({
      host,
      port,
      reason,
      address,
      status: refuse(response, reason, { host, port }),
    })
  }

  const match = ABSOLUTE_HTTP.exec(request.url ?? '')
  if (match === null) return deny('bad-request')
  const authority = parseAuthority(match[1]!, 80)
  if (authority === undefined) return deny('bad-request')
  host = authority.host
  port = authority.port
  const target = normalizeTargetHost(authority.host)
  if (target === undefined) return deny('bad-request')
  host = policySubject(target)
  const path = match[2] === '' ? '/' : match[2]!.startsWith('/') ? match[2]! : `/${match[2]}`

  const hostCheck = checkHostHeaders(request.rawHeaders, target, port, 80)
  if (hostCheck !== 'ok') return deny(hostCheck)
  const framing = checkFraming(request)
  if (framing !== undefined) return deny(framing)

  if (!found.ok) return deny(found.reason)
  const { broker } = found.client

  const foreign = broker.foreignPlaceholders(host)
  if (
    CredentialBroker.carriesPlaceholder(request.url ?? '', foreign) ||
    request.rawHeaders.some((text) => CredentialBroker.carriesPlaceholder(text, foreign))
  ) {
    return deny('credential-placeholder-misdirected')
  }

  // The secret must not cross in clear: a bound host is reached over TLS,
  // on 443 when the client named the plain-HTTP default.
  const secure = broker.isBound(host)
  const dialPort = secure && port === 80 ? 443 : port
  port = dialPort

  const release = runtime.slots.acquire(clientAddress)
  if (release === undefined) return deny('too-many-tunnels')
  let released = false
  const releaseOnce = (): void => {
    if (!released) release()
    released = true
  }

  const admission = await admit(runtime, found.client, target, dialPort)
  if (!admission.ok) {
    releaseOnce()
    return deny(admission.reason, admission.address)
  }

  let bytesUp = 0
  let bytesDown = 0
  let address: string | undefined
  let misdirected = false
  // Only now, with the request allowed, may the client start sending its body.
  if (expectsContinue) response.writeContinue()
  const limits = runtime.options.limits
  const upstream = new Client(`${secure ? 'https' : 'http'}://${urlHost(target)}:${dialPort}`, {
    connect: pinnedConnector({
      addresses: admission.addresses,
      servername: target.kind === 'name' ? target.name : undefined,
      timeoutMs: limits.connectTimeoutMs,
      tls: runtime.options.upstreamTls,
      onConnected: (dialled) => {
        address = dialled
      },
    }),
    headersTimeout: limits.idleTimeoutMs,
    bodyTimeout: limits.idleTimeoutMs,
    pipelining: 1,
  })
  const abort = new AbortController()
  response.once('close', () => {
    if (!response.writableFinished) abort.abort(new Error('client closed'))
  })

  const secrets = secure ? broker.secretsFor(host) : []
  const headers = broker.applyTo(host, forwardableHeaders(request.rawHeaders)).filter(
    // A compressed answer could carry an echoed secret past the redactor.
    ([name]) => secrets.length === 0 || name.toLowerCase() !== 'accept-encoding',
  )
  if (secrets.length > 0) headers.push(['accept-encoding', 'identity'])
  headers.push(['host', hostHeader(target, dialPort, secure ? 443 : 80)])

  let body: Readable | null = null
  if (hasBody(request)) {
    const relay: Transform = foreign.length > 0 ? placeholderScanner(foreign) : new PassThrough()
    relay.once('error', (error) => {
      if (error instanceof PlaceholderMisdirectedError) misdirected = true
    })
    request.on('data', (chunk: Buffer) => {
      bytesUp += chunk.length
    })
    request.pipe(relay)
    body = relay
  }

  const finish = (reason: EgressReasonCode, status: number | undefined, error?: string): void => {
    releaseOnce()
    upstream.destroy().catch(() => {})
    exchange.report({ host, port, reason, address, bytesUp, bytesDown, status, error })
  }

  let answer: Awaited<ReturnType<Client['request']>>
  try {
    answer = await upstream.request({
      method: request.method ?? 'GET',
      path,
      headers: headers.flat(),
      body,
      signal: abort.signal,
    })
  } catch (error) {
    if (abort.signal.aborted) return finish('allowed', undefined, 'client closed')
    const reason = misdirected ? 'credential-placeholder-misdirected' : upstreamFailureReason(error)
    const status = refuse(response, reason, { host, port })
    return finish(reason, status, describe(error))
  }

  const outgoing = responseHeaders(answer.headers).map((text) => maskSecrets(text, secrets))
  response.writeHead(answer.statusCode, outgoing)
  answer.body.on('data', (chunk: Buffer) => {
    bytesDown += chunk.length
  })
  const streams: NodeJS.ReadableStream[] = [answer.body]
  if (secrets.length > 0) streams.push(secretRedactor(secrets))
  pipeline([...streams, response], (error) => {
    if (misdirected) finish('credential-placeholder-misdirected', answer.statusCode)
    else finish('allowed', answer.statusCode, error ? describe(error) : undefined)
  })
}

/** Answers a refusal on an HTTP response that has not started, then closes the connection. */
function refuse(
  response: ServerResponse,
  reason: EgressReasonCode,
  destination: RefusedDestination,
): number {
  const status = statusForReason(reason)
  if (response.headersSent) {
    response.destroy()
    return status
  }
  const body = denialBody(reason, destination)
  refusedConnections.add(response.socket ?? response)
  response.shouldKeepAlive = false
  response.writeHead(status, {
    [EGRESS_DENIED_HEADER]: reason,
    'content-type': 'text/plain; charset=utf-8',
    'content-length': Buffer.byteLength(body),
    connection: 'close',
  })
  response.end(body)
  return status
}

function checkFraming(request: IncomingMessage): EgressReasonCode | undefined {
  const te = request.headers['transfer-encoding']
  if (te === undefined) return undefined
  if (request.headers['content-length'] !== undefined) return 'ambiguous-length'
  return te.trim().toLowerCase() === 'chunked' ? undefined : 'ambiguous-length'
}

function hasBody(request: IncomingMessage): boolean {
  if (request.headers['transfer-encoding'] !== undefined) return true
  const length = request.headers['content-length']
  return length !== undefined && length !== '0'
}

/** The request's headers minus hop-by-hop ones and whatever `Connection` names. */
function forwardableHeaders(rawHeaders: readonly string[]): HeaderList {
  const named = connectionTokens(rawHeaders)
  const result: HeaderList = []
  for (let index = 0; index + 1 < rawHeaders.length; index += 2) {
    const name = rawHeaders[index]!
    const lower = name.toLowerCase()
    if (HOP_BY_HOP.has(lower) || named.has(lower)) continue
    result.push([name, rawHeaders[index + 1]!])
  }
  return result
}

function connectionTokens(rawHeaders: readonly string[]): Set<string> {
  const tokens = new Set<string>()
  for (let index = 0; index + 1 < rawHeaders.length; index += 2) {
    const lower = rawHeaders[index]!.toLowerCase()
    if (lower !== 'connection' && lower !== 'proxy-connection') continue
    for (const token of rawHeaders[index + 1]!.split(',')) {
      const trimmed = token.trim().toLowerCase()
      if (trimmed !== '') tokens.add(trimmed)
    }
  }
  return tokens
}

function responseHeaders(headers: Record<string, string | string[] | undefined>): string[] {
  const connection = headers.connection
  const named = new Set(
    [connection ?? []]
      .flat()
      .flatMap((value) => value.split(','))
      .map((token) => token.trim().toLowerCase()),
  )
  const flat: string[] = []
  for (const [name, value] of Object.entries(headers)) {
    if (value === undefined) continue
    const lower = name.toLowerCase()
    if (HOP_BY_HOP.has(lower) || named.has(lower) || lower === EGRESS_DENIED_HEADER) continue
    for (const item of [value].flat()) flat.push(name, item)
  }
  return flat
}

function urlHost(target: TargetHost): string {
  if (target.kind === 'name') return target.name
  return target.ip.family === 6 ? `[${target.ip.address}]` : target.ip.address
}

function hostHeader(target: TargetHost, port: number, defaultPort: number): string {
  return port === defaultPort ? urlHost(target) : `${urlHost(target)}:${port}`
}

function upstreamFailureReason(error: unknown): EgressReasonCode {
  if (
    error instanceof PlaceholderMisdirectedError ||
    hasCause(error, PlaceholderMisdirectedError)
  ) {
    return 'credential-placeholder-misdirected'
  }
  if (error instanceof DialError) return error.timedOut ? 'connect-timeout' : 'connect-failed'
  const code = (error as { code?: unknown } | null)?.code
  if (code === 'UND_ERR_CONNECT_TIMEOUT') return 'connect-timeout'
  return 'connect-failed'
}

function hasCause(error: unknown, type: new (...args: never[]) => Error): boolean {
  let current: unknown = error
  for (let depth = 0; depth < 5 && current instanceof Error; depth += 1) {
    if (current instanceof type) return true
    current = (current as Error).cause
  }
  return false
}

function describe(error: unknown): string {
  return error instanceof Error ? error.message : String(error)
}
