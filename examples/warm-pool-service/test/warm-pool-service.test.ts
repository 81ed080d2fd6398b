import { type ChildProcess, spawn } from 'node:child_process'
import { once } from 'node:events'
import { createInterface } from 'node:readline'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'

let service: ChildProcess
let base = ''

beforeAll(async () => {
  service = spawn(process.execPath, [new URL('../dist/main.js', import.meta.url).pathname], {
    stdio: ['ignore', 'pipe', 'inherit'],
  })
  const [line] = (await once(createInterface({ input: service.stdout! }), 'line')) as [string]
  base = `http://127.0.0.1:${JSON.parse(line).port}`
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
    expect(await post('{"command": "sh", "args": [')).toEqual({
      status: 400,
      body: { error: 'the body is not JSON; give {"command": string, "args": string[]}' },
    })
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
