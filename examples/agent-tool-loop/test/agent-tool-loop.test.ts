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

describe('the agent tool loop example', () => {
  it("runs the model's tool calls in a sandbox until it answers", async () => {
    const start = await startScript()
    const { stdout } = await run(process.execPath, start.args, {
      cwd: fileURLToPath(example),
      timeout: 90_000,
    })
    expect(start.readme).toContain('pnpm --filter @cordon/example-agent-tool-loop start\n')
    // The README shows the transcript's last four turns as they are printed.
    const lastFour = stdout.trim().split('\n').slice(-4).join('\n')
    expect(start.readme).toContain(`ending with:\n\n\`\`\`\n${lastFour}\n\`\`\``)
    const turns = stdout
      .trim()
      .split('\n')
      .map((line) => JSON.parse(line))
    expect(turns.map((turn) => turn.role)).toEqual([
      'user',
      'model',
      'tool',
      'model',
      'tool',
      'model',
      'tool',
      'answer',
    ])
    expect(turns[4].output).toBe('exit 0\n42\n')
    expect(turns.at(-1).text).toBe('The total of column b is 42.')
  })
})
