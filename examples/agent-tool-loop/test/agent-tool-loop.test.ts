import { execFile } from 'node:child_process'
import { promisify } from 'node:util'
import { describe, expect, it } from 'vitest'

const run = promisify(execFile)

describe('the agent tool loop example', () => {
  it("runs the model's tool calls in a sandbox until it answers", async () => {
    const { stdout } = await run(
      process.execPath,
      [new URL('../dist/main.js', import.meta.url).pathname],
      { timeout: 90_000 },
    )
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
