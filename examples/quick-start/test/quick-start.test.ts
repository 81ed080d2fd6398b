import { execFile } from 'node:child_process'
import { readFile } from 'node:fs/promises'
import { fileURLToPath } from 'node:url'
import { promisify } from 'node:util'
import { describe, expect, it } from 'vitest'

const run = promisify(execFile)
const example = new URL('..', import.meta.url)
const program = new URL('src/main.ts', example)
const readme = new URL('../../../README.md', import.meta.url)

/** The example's `start` script as an argv for this Node, and its own README. */
async function startScript(): Promise<{ args: string[]; readme: string }> {
  const scripts = JSON.parse(await readFile(new URL('package.json', example), 'utf8')).scripts
  const [program, ...args] = String(scripts.start).split(' ')
  expect(program).toBe('node')
  return { args, readme: await readFile(new URL('README.md', example), 'utf8') }
}

describe("the README's Use example", () => {
  it('is this program, verbatim', async () => {
    const code = (await readFile(program, 'utf8')).trim()
    const text = await readFile(readme, 'utf8')
    const block = /## Use\n\n```ts\n([\s\S]*?)```/.exec(text)?.[1]?.trim()
    expect(block).toBe(code)
  })

  it('runs against the real engine, under gVisor, as its README says', async () => {
    const start = await startScript()
    const { stdout } = await run(process.execPath, start.args, {
      cwd: fileURLToPath(example),
      timeout: 90_000,
    })
    expect(stdout.trim()).toBe('task 42: 42 | 1,2')
    expect(start.readme).toContain('pnpm --filter @cordon/example-quick-start start\n')
    expect(start.readme).toContain(`It prints:\n\n\`\`\`\n${stdout}\`\`\``)
  })
})
