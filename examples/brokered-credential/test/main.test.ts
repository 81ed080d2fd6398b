import { execFile } from 'node:child_process'
import { promisify } from 'node:util'
import { describe, expect, it } from 'vitest'

const run = promisify(execFile)

describe('the brokered credential example', () => {
  it('reaches the API with the key added by the gateway, and the sandbox never sees the key', async () => {
    const { stdout } = await run(
      process.execPath,
      [new URL('../dist/main.js', import.meta.url).pathname],
      { timeout: 90_000 },
    )
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
