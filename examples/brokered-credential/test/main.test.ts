import { execFile } from 'node:child_process'
import { readFile } from 'node:fs/promises'
import { fileURLToPath } from 'node:url'
import { promisify } from 'node:util'
import { describe, expect, it } from 'vitest'

const run = promisify(execFile)
const example = new URL('..', import.meta.url)

/** The example's `start` script as an argv for this Node, and its README. */
async function startScript(): Promise<{ args: string[]; readme: string }> {
  const scripts = JSON.parse(await readFile(new URL('package.json', example), 'utf8')).scripts
  const [program, ...args] = String(scripts.start).split(' ')
  expect(program).toBe('node')
  return { args, readme: await readFile(new URL('README.md', example), 'utf8') }
}

describe('the brokered credential example', () => {
  it('reaches the API with the key added by the gateway, and the sandbox never sees the key', async () => {
    const start = await startScript()
    const { stdout } = await run(process.execPath, start.args, {
      cwd: fileURLToPath(example),
      timeout: 90_000,
    })
    expect(start.readme).toContain('pnpm --filter @cordon/example-brokered-credential start\n')
    expect(start.readme).toContain(`one JSON line per step:\n\n\`\`\`\n${stdout}\`\`\``)
    const steps = stdout
      .trim()
      .split('\n')
      .map((line) => JSON.parse(line))
    expect(steps).toEqual([
      {
        step: 'api call from the sandbox',
        exitCode: 0,
        body: { authorized: true, path: '/v1/items' },
      },
      { step: 'the key in the sandbox environment', found: false },
      { step: 'any other host', exitCode: 1, refused: true },
    ])
  })
})
