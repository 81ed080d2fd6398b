/**
 * A small service that runs many short tasks, each in a fresh sandbox
 * claimed from a warm pool: `create()` hands out a sandbox that was started
 * in the background, so a request pays for a claim rather than a start, and
 * no two tasks ever share a sandbox.
 *
 *   POST /run  {"command": "sh", "args": ["-c", "echo hi"]}  ->  the exec result as JSON
 *
 * PORT picks the port (default: a free one, printed on stdout); SIGTERM
 * closes the server and the provider, which destroys the pooled sandboxes.
 */
import { createServer, type IncomingMessage } from 'node:http'
import { createSandboxProvider } from '@cordon/sandbox'
import { BadRequest, clientFailure, USAGE } from './client-failure.js'

const provider = createSandboxProvider({
  backend: { tier: 'container', image: process.env.CORDON_IMAGE ?? 'cordon-test/busybox:latest' },
  layout: { outputs: { source: { type: 'ephemeral', sizeMb: 64 } } },
  defaultMemoryLimitMb: 128,
  pool: { size: 2 },
})
await provider.warm()

async function task(request: IncomingMessage): Promise<{ command: string; args: string[] }> {
  const chunks: Buffer[] = []
  for await (const chunk of request) chunks.push(chunk as Buffer)
  let body: unknown
  try {
    body = JSON.parse(Buffer.concat(chunks).toString('utf8') || '{}')
  } catch {
    throw new BadRequest(`the body is not JSON; ${USAGE}`)
  }
  const { command, args } = (body ?? {}) as { command?: unknown; args?: unknown }
  if (
    typeof command !== 'string' ||
    !Array.isArray(args) ||
    !args.every((arg) => typeof arg === 'string')
  )
    throw new BadRequest(USAGE)
  return { command, args }
}

const server = createServer(async (request, response) => {
  const reply = (status: number, value: unknown): void => {
    response.writeHead(status, { 'content-type': 'application/json' })
    response.end(JSON.stringify(value))
  }
  if (request.method !== 'POST' || request.url !== '/run') return reply(404, { error: 'not found' })
  try {
    const { command, args } = await task(request)
    await using sandbox = await provider.create()
    const result = await sandbox.exec(command, args, { timeout: 5_000 })
    reply(200, { sandbox: sandbox.id, ...result })
  } catch (error) {
    const { status, body } = clientFailure(error)
    // The operator's log gets the whole of what went wrong on the service's side.
    if (status >= 500) console.error(error)
    reply(status, body)
  }
})
server.listen(Number(process.env.PORT ?? 0), '127.0.0.1', () => {
  const address = server.address()
  console.log(JSON.stringify({ port: typeof address === 'object' && address ? address.port : 0 }))
})
process.once('SIGTERM', () => {
  server.close()
  void provider.close().then(() => process.exit(0))
})
