import { type ChildProcess, spawn } from 'node:child_process'
import { once } from 'node:events'
import { readFile } from 'node:fs/promises'
import { createServer } from 'node:net'
import { createInterface } from 'node:readline'
import { fileURLToPath } from 'node:url'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'

const example = new URL('..', import.meta.url)
let service: ChildProcess
let base = ''
let readme = ''

/** A port nothing listens on now, for PORT. */
async function freePort(): Promise<number> {
  const probe = createServer()
  await new Promise<void>((resolve) => probe.listen(0, '127.0.0.1', resolve))
  const { port } = probe.address() as { port: number }
  await new Promise((resolve) => probe.close(resolve))
  return port
}

beforeAll(async () => {
  const scripts = JSON.parse(await readFile(new URL('package.json', example), 'utf8')).scripts
  const [program, ...args] = String(scripts.start).split(' ')
  expect(program).toBe('node')
  readme = await readFile(new URL('README.md', example), 'utf8')
  const port = await freePort()
  // The start script, as the README runs it.
  service = spawn(process.execPath, args, {
    cwd: fileURLToPath(example),
    env: { ...process.env, PORT: String(port) },
    stdio: ['ignore', 'pipe', 'inherit'],
  })
  const [line] = (await once(createInterface({ input: service.stdout! }), 'line')) as [string]
  expect(line).toBe(`{"port":${port}}`)
  base = `http://127.0.0.1:${port}`
}, 90_000)

afterAll(async () => {
  if (service.exitCode === null) {
    service.kill('SIGTERM')
    await once(service, 'exit')
  }
})

const runTask = async (command: string, args: string[]) => {
  const response = await fetch(`${base}/run`, {
    method: 'POST',
    body: JSON.stringify({ command, args }),
  })
  return { status: response.status, body: (await response.json()) as Record<string, unknown> }
}

describe('the warm-pooled service example', () => {
  it('is started as its README says', () => {
    expect(readme).toContain('PORT=8080 pnpm --filter @cordon/example-warm-pool-service start\n')
  })

  it('runs each of many short tasks in its own sandbox', async () => {
    const results = await Promise.all(
      Array.from({ length: 8 }, (_, index) =>
        runTask('sh', ['-c', `echo task ${index}; touch /tmp/mark; ls /tmp`]),
      ),
    )
    expect(results.map((result) => result.status)).toEqual(Array(8).fill(200))
    expect(results.map((result) => result.body.stdout)).toEqual(
      results.map((_, index) => `task ${index}\nmark\n`),
    )
    expect(new Set(results.map((result) => result.body.sandbox)).size).toBe(8)
  })

  it('answers input it cannot run with 400 and a message, never a stack', async () => {
    const post = async (body: string) => {
      const response = await fetch(`${base}/run`, { method: 'POST', body })
      const text = await response.text()
      // No stack frames, no host paths: only what the client can act on.
      expect(text).not.toMatch(/stack|\bat .*:\d+:\d+|node_modules|\/dist\//)
      return { status: response.status, body: JSON.parse(text) as Record<string, unknown> }
    }
    const notJson = await post('{"command": "sh", "args": [')
    expect(notJson).toEqual({
      status: 400,
      body: { error: 'the body is not JSON; give {"command": string, "args": string[]}' },
    })
    expect(readme).toContain(`\`\`\`\n${JSON.stringify(notJson.body)}\n\`\`\``)
    expect(await post('{"command": "sh", "args": [1]}')).toEqual({
      status: 400,
      body: { error: 'give {"command": string, "args": string[]}' },
    })
    const refused = await post(JSON.stringify({ command: '', args: [] }))
    expect(refused.status).toBe(400)
    expect(Object.keys(refused.body).sort()).toEqual(['code', 'error', 'issues', 'name'])
    expect(refused.body).toMatchObject({
      name: 'SandboxConfigValidationError',
      code: 'CONFIG_INVALID',
      issues: [{ path: 'command' }],
    })
  })

  it('ends cleanly on SIGTERM', async () => {
    service.kill('SIGTERM')
    const [code] = await once(service, 'exit')
    expect(code).toBe(0)
  })
})
