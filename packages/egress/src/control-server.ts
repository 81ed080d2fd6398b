/**
 * The standalone proxy's control endpoint: how a gateway's owner registers
 * and removes clients while the proxy runs. It listens on its own port,
 * which the proxy treats as itself and never dials, and every request but
 * the health check must carry the bearer token.
 */
import { createHash, timingSafeEqual } from 'node:crypto'
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http'
import { egressPolicySchema, SandboxConfigValidationError } from '@cordon/core'
import { z } from 'zod'
import type { EgressProxy } from './egress-proxy.js'
import { credentialListSchema } from './options.js'

/** The part of the proxy the control endpoint drives. */
export type ClientRegistry = Pick<EgressProxy, 'setClientPolicy' | 'removeClient'>

const MAX_BODY_BYTES = 256 * 1024

const registrationSchema = z
  .object({
    clientId: z.string().min(1).max(256),
    policy: egressPolicySchema,
    brokeredCredentials: credentialListSchema.optional(),
  })
  .strict()

export function createControlServer(proxy: ClientRegistry, token: string): Server {
  const expected = digest(`Bearer ${token}`)
  const server = createServer(
    { requestTimeout: 10_000, headersTimeout: 10_000 },
    (request, response) => {
      handle(proxy, expected, request, response).catch((error: unknown) => {
        reply(response, 500, { error: error instanceof Error ? error.message : String(error) })
      })
    },
  )
  return server
}

async function handle(
  proxy: ClientRegistry,
  expected: Buffer,
  request: IncomingMessage,
  response: ServerResponse,
): Promise<void> {
  const url = new URL(request.url ?? '/', 'http://control')
  if (url.pathname === '/healthz') {
    if (request.method !== 'GET') return reply(response, 405, { error: 'method not allowed' })
    return reply(response, 200, { ok: true })
  }
  // Compare digests, so neither the length nor the content of the token
  // leaks through timing.
  if (!timingSafeEqual(digest(request.headers.authorization ?? ''), expected)) {
    return reply(response, 401, { error: 'missing or wrong bearer token' })
  }
  const match = /^\/clients\/([^/]+)$/.exec(url.pathname)
  if (match === null) return reply(response, 404, { error: 'not found' })
  let address: string
  try {
    address = decodeURIComponent(match[1]!)
  } catch {
    return reply(response, 400, { error: 'malformed client address' })
  }
  if (request.method === 'DELETE') {
    return proxy.removeClient(address)
      ? reply(response, 204)
      : reply(response, 404, { error: 'no such client' })
  }
  if (request.method !== 'PUT') return reply(response, 405, { error: 'method not allowed' })
  const body = await readBody(request)
  if (body === undefined)
    return reply(response, 413, { error: `body over ${MAX_BODY_BYTES} bytes` })
  let json: unknown
  try {
    json = JSON.parse(body)
  } catch {
    return reply(response, 400, { error: 'body is not JSON' })
  }
  const parsed = registrationSchema.safeParse(json)
  if (!parsed.success) {
    return reply(response, 400, {
      error: 'invalid client registration',
      issues: parsed.error.issues.map((issue) => ({
        path: issue.path.join('.'),
        message: issue.message,
      })),
    })
  }
  try {
    proxy.setClientPolicy(address, parsed.data)
  } catch (error) {
    if (SandboxConfigValidationError.isInstance(error)) {
      return reply(response, 400, { error: 'invalid client registration', issues: error.issues })
    }
    throw error
  }
  return reply(response, 204)
}

function digest(text: string): Buffer {
  return createHash('sha256').update(text).digest()
}

async function readBody(request: IncomingMessage): Promise<string | undefined> {
  const chunks: Buffer[] = []
  let size = 0
  for await (const chunk of request as AsyncIterable<Buffer>) {
    size += chunk.length
    if (size > MAX_BODY_BYTES) return undefined
    chunks.push(chunk)
  }
  return Buffer.concat(chunks).toString('utf8')
}

function reply(response: ServerResponse, status: number, body?: unknown): void {
  if (response.headersSent) {
    response.end()
    return
  }
  if (body === undefined) {
    response.writeHead(status).end()
    return
  }
  const text = `${JSON.stringify(body)}\n`
  response
    .writeHead(status, {
      'content-type': 'application/json',
      'content-length': Buffer.byteLength(text),
    })
    .end(text)
}
