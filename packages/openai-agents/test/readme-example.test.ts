import { readFile } from 'node:fs/promises'
import { setDefaultModelProvider } from '@openai/agents-core'
import {
  assistantMessage,
  functionCall,
  modelResponder,
  ScriptedModel,
} from '@openai/agents-core/testing'
import { describe, expect, it, vi } from 'vitest'

const example = new URL('./fixtures/readme-example.ts', import.meta.url)
const readme = new URL('../README.md', import.meta.url)

describe("the README's first example", () => {
  it('is the fixture, verbatim', async () => {
    const text = await readFile(readme, 'utf8')
    const block = /```ts\n([\s\S]*?)```/.exec(text)?.[1]?.trim()
    expect(block).toBe((await readFile(example, 'utf8')).trim())
  })

  it('runs the agent in a real Docker sandbox (the default model is a scripted one here)', async () => {
    const model = new ScriptedModel([
      [functionCall('exec_command', { cmd: 'uname -s' }, { callId: 'c1' })],
      modelResponder((call) => {
        const output = JSON.stringify(call.request.input)
        return [assistantMessage(output.includes('Linux') ? 'Linux' : `unexpected: ${output}`)]
      }),
    ])
    setDefaultModelProvider({ getModel: () => model })
    const log = vi.spyOn(console, 'log').mockImplementation(() => {})
    try {
      await import(example.href)
      expect(log).toHaveBeenCalledWith('Linux')
    } finally {
      log.mockRestore()
    }
    model.assertComplete()
  })
})
