import { execFile } from 'node:child_process'
import { readFile } from 'node:fs/promises'
import { promisify } from 'node:util'
import { describe, expect, it } from 'vitest'

const run = promisify(execFile)
const program = new URL('../src/main.ts', import.meta.url)
const readme = new URL('../../../README.md', import.meta.url)

describe("the README's Use example", () => {
  it('is this program, verbatim', async () => {
    const code = (await readFile(program, 'utf8')).trim()
    const text = await readFile(readme, 'utf8')
    const block = /## Use\n\n```ts\n([\s\S]*?)```/.exec(text)?.[1]?.trim()
    expect(block).toBe(code)
  })

  it('runs against the real engine, under gVisor', async () => {
    const { stdout } = await run(
      process.execPath,
      [new URL('../dist/main.js', import.meta.url).pathname],
      {
        timeout: 90_000,
      },
    )
    expect(stdout.trim()).toBe('task 42: 42 | 1,2')
  })
})
