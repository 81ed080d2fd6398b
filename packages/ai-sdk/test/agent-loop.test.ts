import { generateText, stepCountIs, tool } from 'ai'
import { MockLanguageModelV4 } from 'ai/test'
import { afterAll, describe, expect, it } from 'vitest'
import { z } from 'zod'
import { createCordonHarnessSandbox } from '../src/index.js'
import { testProvider } from './test-run.js'

const provider = testProvider()
afterAll(async () => {
  await provider.close()
})

const usage = {
  inputTokens: { total: 1, noCache: 1, cacheRead: undefined, cacheWrite: undefined },
  outputTokens: { total: 1, text: 1, reasoning: undefined },
}

/** One model step that calls a tool. */
function toolStep(toolName: string, input: unknown) {
  return {
    content: [
      {
        type: 'tool-call' as const,
        toolCallId: `call-${toolName}-${Math.random()}`,
        toolName,
        input: JSON.stringify(input),
      },
    ],
    finishReason: { unified: 'tool-calls' as const, raw: 'tool_calls' },
    usage,
    warnings: [],
  }
}

/**
 * Tools that use whatever sandbox the AI SDK hands them (`experimental_sandbox`
 * in the tool's execution options): what a host writes once and runs in any
 * harness sandbox.
 */
const tools = {
  writeFile: tool({
    inputSchema: z.object({ path: z.string(), content: z.string() }),
    execute: async ({ path, content }, { experimental_sandbox: sandbox }) => {
      await sandbox!.writeTextFile({ path, content })
      return 'written'
    },
  }),
  run: tool({
    inputSchema: z.object({ command: z.string() }),
    execute: async ({ command }, { experimental_sandbox: sandbox }) =>
      await sandbox!.run({ command }),
  }),
  readFile: tool({
    inputSchema: z.object({ path: z.string(), startLine: z.number(), endLine: z.number() }),
    execute: async ({ path, startLine, endLine }, { experimental_sandbox: sandbox }) =>
      await sandbox!.readTextFile({ path, startLine, endLine }),
  }),
  tail: tool({
    inputSchema: z.object({ command: z.string() }),
    execute: async ({ command }, { experimental_sandbox: sandbox }) => {
      const process = await sandbox!.spawn({ command })
      const [stdout, { exitCode }] = await Promise.all([
        new Response(process.stdout).text(),
        process.wait(),
      ])
      return { stdout, exitCode }
    },
  }),
}

describe('the AI SDK runs its tool loop against a cordon harness session', () => {
  it('the model’s tool calls write files and run commands inside the real Docker sandbox', async () => {
    const harnessProvider = createCordonHarnessSandbox(provider)
    const session = await harnessProvider.createSession({ sessionId: 'loop' })
    try {
      const model = new MockLanguageModelV4({
        doGenerate: [
          toolStep('writeFile', { path: 'notes/plan.txt', content: 'one\ntwo\nthree\n' }),
          toolStep('run', {
            command:
              'mkdir -p out && wc -l < notes/plan.txt > out/count && id -u && echo err >&2; exit 4',
          }),
          toolStep('readFile', { path: 'notes/plan.txt', startLine: 2, endLine: 9 }),
          toolStep('tail', { command: 'for i in 1 2 3; do echo line $i; done; exit 2' }),
          {
            content: [{ type: 'text', text: 'finished' }],
            finishReason: { unified: 'stop', raw: 'stop' },
            usage,
            warnings: [],
          },
        ],
      })
      const result = await generateText({
        model,
        tools,
        prompt: 'work',
        stopWhen: stepCountIs(10),
        experimental_sandbox: session.restricted(),
      })
      expect(result.text).toBe('finished')
      const outputs = result.steps.flatMap((step) => step.toolResults.map((part) => part.output))
      expect(outputs[0]).toBe('written')
      expect(outputs[1]).toMatchObject({ exitCode: 4, stderr: 'err\n' })
      expect(Number((outputs[1] as { stdout: string }).stdout.trim())).toBeGreaterThan(0)
      expect(outputs[2]).toBe('two\nthree\n')
      expect(outputs[3]).toEqual({ stdout: 'line 1\nline 2\nline 3\n', exitCode: 2 })

      // Inside the sandbox, under its working directory.
      const root = session.defaultWorkingDirectory
      expect((await session.sandbox.readFile(`${root}/out/count`)).toString().trim()).toBe('3')
      expect((await session.sandbox.readFile(`${root}/notes/plan.txt`)).toString()).toBe(
        'one\ntwo\nthree\n',
      )
    } finally {
      await session.destroy()
    }
    expect(session.sandbox.status).toBe('destroyed')
  })
})
