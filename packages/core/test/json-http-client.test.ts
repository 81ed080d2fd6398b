import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http'
import type { AddressInfo } from 'node:net'
import { afterEach, describe, expect, it } from 'vitest'
import {
  errorMarker,
  hasErrorMarker,
  JsonHttpClient,
  type JsonHttpClientOptions,
} from '../src/backend-kit.js'
import {
  SandboxAbortedError,
  SandboxBackendUnavailableError,
  SandboxError,
  SandboxOperationError,
  SandboxTransportError,
} from '../src/index.js'

interface Seen {
  readonly method: string
  readonly url: string
  readonly authorization: string | undefined
  readonly contentType: string | undefined
  readonly body: string
}

/** A scripted service: each request gets the next answer (the last one repeats). */
async function service(
  answers: Array<(res: ServerResponse) => void>,
): Promise<{ url: string; seen: Seen[]; close(): Promise<void> }> {
  const seen: Seen[] = []
  const server: Server = createServer((req: IncomingMessage, res: ServerResponse) => {
    const chunks: Buffer[] = []
    req.on('data', (chunk: Buffer) => chunks.push(chunk))
    req.on('end', () => {
      seen.push({
        method: req.method ?? '',
        url: req.url ?? '',
        authorization: req.headers.authorization,
        contentType: req.headers['content-type'],
        body: Buffer.concat(chunks).toString(),
      })
      const answer = answers[Math.min(seen.length - 1, answers.length - 1)]!
      answer(res)
    })
  })
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    seen,
    close: () =>
      new Promise((resolve) => {
        server.closeAllConnections()
        server.close(() => resolve())
      }),
  }
}

const json =
  (status: number, body: unknown, headers: Record<string, string> = {}) =>
  (res: ServerResponse) =>
    res
      .writeHead(status, { 'content-type': 'application/json', ...headers })
      .end(JSON.stringify(body))

const cleanups: Array<() => Promise<void>> = []
afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup()
})

async function clientFor(
  answers: Array<(res: ServerResponse) => void>,
  options: Partial<JsonHttpClientOptions> = {},
) {
  const served = await service(answers)
  let tokens = 0
  const client = new JsonHttpClient({
    backend: 'test:backend',
    endpoint: `${served.url}/`,
    getToken: async () => `token-${++tokens}`,
    tokenClosureName: 'getToken',
    audience: 'the test service',
    responseHeaders: ['x-request-id'],
    ...options,
  })
  cleanups.push(
    () => served.close(),
    () => client.close(),
  )
  return { client, served, tokens: () => tokens }
}

describe('JsonHttpClient', () => {
  it('sends JSON with a fresh bearer token and reads JSON, keeping the headers asked for', async () => {
    const { client, served, tokens } = await clientFor([
      json(201, { made: true }, { 'x-request-id': 'r-1', 'x-other': 'dropped' }),
    ])
    const response = await client.send('PUT', client.urlFor('/things/a?v=1'), {
      body: { name: 'a' },
    })
    expect(response).toMatchObject({ status: 201, body: { made: true }, method: 'PUT' })
    expect(response.headers).toEqual({ 'retry-after': undefined, 'x-request-id': 'r-1' })
    expect(served.seen).toEqual([
      {
        method: 'PUT',
        url: '/things/a?v=1',
        authorization: 'Bearer token-1',
        contentType: 'application/json',
        body: '{"name":"a"}',
      },
    ])
    await client.send('GET', client.urlFor('/things/a'))
    expect(tokens()).toBe(2)
    expect(served.seen[1]?.authorization).toBe('Bearer token-2')
  })

  it('turns a body that is not JSON into an InvalidResponse error body', async () => {
    const { client } = await clientFor([(res) => res.writeHead(502).end('<html>bad gateway')])
    const response = await client.send('GET', client.urlFor('/x'), { maxAttempts: 1 })
    expect(response.body).toEqual({
      error: { code: 'InvalidResponse', message: '<html>bad gateway' },
    })
  })

  it("retries throttling with the server's Retry-After, and idempotent verbs only by default", async () => {
    const { client, served } = await clientFor([
      json(
        429,
        { error: { code: 'TooManyRequests', message: 'slow down' } },
        { 'retry-after': '1' },
      ),
      json(200, { ok: true }),
    ])
    const retried: number[] = []
    const started = Date.now()
    const response = await client.send('GET', client.urlFor('/x'), {
      onRetry: (failure) => retried.push((failure as { status: number }).status),
    })
    expect(Date.now() - started).toBeGreaterThanOrEqual(950)
    expect(response.status).toBe(200)
    expect(retried).toEqual([429])
    expect(served.seen).toHaveLength(2)

    const once = await clientFor([json(503, { error: { code: 'Busy', message: 'later' } })])
    expect((await once.client.send('POST', once.client.urlFor('/x'), { body: {} })).status).toBe(
      503,
    )
    expect(once.served.seen).toHaveLength(1)
  })

  it('gives up after maxAttempts with the last answer', async () => {
    const { client, served } = await clientFor([json(500, {}, { 'retry-after': '0' })])
    expect((await client.send('DELETE', client.urlFor('/x'), { maxAttempts: 3 })).status).toBe(500)
    expect(served.seen).toHaveLength(3)
  })

  it('retries a refused connection, then reports a transport error naming the URL without its query', async () => {
    const client = new JsonHttpClient({
      backend: 'test:backend',
      endpoint: 'http://127.0.0.1:9',
      getToken: async () => 't',
      tokenClosureName: 'getToken',
      audience: 'the test service',
    })
    cleanups.push(() => client.close())
    const retried: unknown[] = []
    const error = await client
      .send('GET', client.urlFor('/x?secret=1'), {
        maxAttempts: 2,
        onRetry: (failure) => retried.push(failure),
      })
      .catch((caught: unknown) => caught)
    expect(SandboxTransportError.isInstance(error)).toBe(true)
    expect((error as SandboxTransportError).endpoint).toBe('http://127.0.0.1:9/x')
    expect(retried).toHaveLength(1)
    expect(SandboxTransportError.isInstance(retried[0])).toBe(true)
  })

  it('ends a retry wait the moment the signal fires', async () => {
    const { client } = await clientFor([json(429, {}, { 'retry-after': '30' })])
    const controller = new AbortController()
    setTimeout(() => controller.abort(), 100)
    const started = Date.now()
    const error = await client
      .send('GET', client.urlFor('/x'), { signal: controller.signal })
      .catch((caught: unknown) => caught)
    expect(SandboxAbortedError.isInstance(error)).toBe(true)
    expect(Date.now() - started).toBeLessThan(2_000)
  })

  it('lets a request on the wire finish when asked to, and hands it over', async () => {
    const { client } = await clientFor([
      (res) => setTimeout(() => json(201, { made: 1 })(res), 200),
    ])
    const controller = new AbortController()
    let inFlight: Promise<unknown> | undefined
    const pending = client.send('PUT', client.urlFor('/x'), {
      signal: controller.signal,
      finishInFlight: true,
      onAttempt: (attempt) => {
        inFlight = attempt
      },
    })
    setTimeout(() => controller.abort(), 50)
    expect(SandboxAbortedError.isInstance(await pending.catch((caught: unknown) => caught))).toBe(
      true,
    )
    expect(await inFlight).toMatchObject({ status: 201, body: { made: 1 } })
  })

  it('reports a getToken that fails as the backend being unavailable, without sending', async () => {
    const broken = new Error('vault sealed')
    const { client, served } = await clientFor([json(200, {})], {
      getToken: () => Promise.reject(broken),
    })
    const error = await client.send('GET', client.urlFor('/x')).catch((caught: unknown) => caught)
    expect(SandboxBackendUnavailableError.isInstance(error)).toBe(true)
    expect((error as Error).message).toContain('getToken() failed')
    expect((error as Error).cause).toBe(broken)
    expect(served.seen).toEqual([])
  })

  it('reads a failed answer as a typed error: refused token, unavailable, or a failed operation', async () => {
    const { client } = await clientFor([json(200, {})])
    const answer = (status: number) => ({
      status,
      headers: {},
      body: { error: { code: 'Code', message: 'what happened' } },
      method: 'GET' as const,
      url: 'http://service/x',
    })
    for (const status of [401, 403]) {
      const error = client.statusError('read', answer(status))
      expect(SandboxBackendUnavailableError.isInstance(error), String(status)).toBe(true)
      expect(error).toMatchObject({ backend: 'test:backend' })
      expect(error.message).toContain('refused the bearer token from getToken()')
    }
    for (const status of [408, 429, 500, 501, 503]) {
      expect(
        SandboxBackendUnavailableError.isInstance(client.statusError('read', answer(status))),
      ).toBe(true)
    }
    const failed = client.statusError('read', answer(400), 'the cause')
    expect(SandboxOperationError.isInstance(failed)).toBe(true)
    expect(failed).toMatchObject({ operation: 'read', cause: 'the cause' })
    expect(failed.message).toContain('Code: what happened (HTTP 400)')
  })
})

describe('error markers for backend error classes', () => {
  const marker = errorMarker('KitTestError')
  class KitTestError extends SandboxOperationError {
    protected readonly [marker] = true
    static override isInstance(value: unknown): value is KitTestError {
      return hasErrorMarker(value, marker)
    }
  }

  it("use core's scheme, so a class is recognised by marker and its siblings are not", () => {
    expect(marker).toBe(Symbol.for('cordon.error.KitTestError'))
    const error = new KitTestError('op', 'failed')
    expect(KitTestError.isInstance(error)).toBe(true)
    expect(SandboxError.isInstance(error)).toBe(true)
    expect(KitTestError.isInstance(new SandboxOperationError('op', 'failed'))).toBe(false)
    for (const value of [undefined, null, {}, 'KitTestError', new Error('x')]) {
      expect(KitTestError.isInstance(value)).toBe(false)
    }
    // A copy from another instance of the package carries the same marker.
    expect(KitTestError.isInstance({ [Symbol.for('cordon.error.KitTestError')]: true })).toBe(true)
  })
})
