import { readFile } from 'node:fs/promises'
import { MockLanguageModelV4, MockProviderV4 } from 'ai/test'
import { describe, expect, it, vi } from 'vitest'

const example = new URL('./fixtures/readme-example.ts', import.meta.url)
const readme = new URL('../README.md', import.meta.url)

const usage = {
  inputTokens: { total: 1, noCache: 1, cacheRead: undefined, cacheWrite: undefined },
  outputTokens: { total: 1, text: 1, reasoning: undefined },
}

describe("the README's first example", () => {
  it('is the fixture, verbatim', async () => {
    const text = await readFile(readme, 'utf8')
    const block = /```ts\n([\s\S]*?)```/.exec(text)?.[1]?.trim()
    expect(block).toBe((await readFile(example, 'utf8')).trim())
  })

  it('runs the tool loop in a real Docker sandbox (the model is a mock behind the default provider)', async () => {
    const model = new MockLanguageModelV4({
      doGenerate: async ({ prompt }) => {
        const toolOutput = JSON.stringify(prompt.filter((message) => message.role === 'tool'))
        if (toolOutput === '[]') {
          return {
            content: [
              {
                type: 'tool-call',
                toolCallId: 'c1',
                toolName: 'shell',
                input: '{"command":"uname -s"}',
              },
            ],
            finishReason: { unified: 'tool-calls', raw: undefined },
            usage,
            warnings: [],
          }
        }
        return {
          content: [
            {
              type: 'text',
              text: toolOutput.includes('Linux') ? 'Linux' : `unexpected: ${toolOutput}`,
            },
          ],
          finishReason: { unified: 'stop', raw: undefined },
          usage,
          warnings: [],
        }
      },
    })
    globalThis.AI_SDK_DEFAULT_PROVIDER = new MockProviderV4({
      languageModels: { 'openai/gpt-5.1': model },
    })
    const log = vi.spyOn(console, 'log').mockImplementation(() => {})
    try {
      await import(example.href)
      expect(log).toHaveBeenCalledWith('Linux')
    } finally {
      log.mockRestore()
      globalThis.AI_SDK_DEFAULT_PROVIDER = undefined
    }
  })
})
