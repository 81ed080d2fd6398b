import {
  HarnessAgent,
  type HarnessAgentAdapter,
  type HarnessAgentAdapterSession,
  type HarnessAgentResumeSessionState,
  HarnessCapabilityUnsupportedError,
} from '@ai-sdk/harness/agent'
import { afterAll, describe, expect, it } from 'vitest'
import { type CordonHarnessSession, createCordonHarnessSandbox } from '../src/index.js'
import { testProvider } from './test-run.js'

const provider = testProvider()
afterAll(async () => {
  await provider.close()
})

const HARNESS_ID = 'scripted-shell'
const usage = {
  inputTokens: { total: 1, noCache: 1, cacheRead: undefined, cacheWrite: undefined },
  outputTokens: { total: 1, text: 1, reasoning: undefined },
}
const stop = { unified: 'stop' as const, raw: 'stop' }

/**
 * A stand-in for an in-sandbox agent runtime (the part a real adapter such as
 * a coding agent's bridge provides): each prompt is a shell command it runs in
 * the session's work directory through the sandbox session the harness hands
 * it, answering with the command's output. Everything around it (creating the
 * sandbox through the provider, the bootstrap, the work directory, detach,
 * resume and destroy) is the harness's own `HarnessAgent`.
 */
function scriptedShellHarness(
  started: Array<{ sandboxSession: unknown; workDir: string }>,
): HarnessAgentAdapter {
  return {
    specificationVersion: 'harness-v1',
    harnessId: HARNESS_ID,
    builtinTools: {},
    getBootstrap: async () => ({
      harnessId: HARNESS_ID,
      bootstrapDir: '.scripted-shell',
      files: [{ path: '.scripted-shell/version', content: '1\n' }],
      commands: [],
    }),
    async doStart({ sandboxSession, sessionWorkDir, sessionId, resumeFrom }) {
      started.push({ sandboxSession, workDir: sessionWorkDir })
      const state = (): HarnessAgentResumeSessionState => ({
        type: 'resume-session',
        specificationVersion: 'harness-v1',
        harnessId: HARNESS_ID,
        data: { workDir: sessionWorkDir },
      })
      const session: HarnessAgentAdapterSession = {
        sessionId,
        isResume: resumeFrom !== undefined,
        async doPromptTurn({ prompt, emit }) {
          const command = typeof prompt === 'string' ? prompt : JSON.stringify(prompt.content)
          const done = (async () => {
            const result = await sandboxSession.run({ command, workingDirectory: sessionWorkDir })
            emit({ type: 'stream-start' })
            emit({ type: 'text-start', id: 't' })
            emit({ type: 'text-delta', id: 't', delta: `${result.exitCode}:${result.stdout}` })
            emit({ type: 'text-end', id: 't' })
            emit({ type: 'finish-step', finishReason: stop, usage })
            emit({ type: 'finish', finishReason: stop, totalUsage: usage })
          })()
          return { submitToolResult: async () => {}, done }
        },
        async doCompact() {},
        async doContinueTurn() {
          throw new Error('this stand-in never suspends a turn')
        },
        async doSuspendTurn() {
          throw new Error('this stand-in never suspends a turn')
        },
        doDetach: async () => state(),
        doStop: async () => state(),
        async doDestroy() {},
      }
      return session
    },
  }
}

describe('HarnessAgent manages cordon sandboxes through the provider', () => {
  it('creates, bootstraps, runs a turn, detaches, resumes the same sandbox and destroys it', async () => {
    const started: Array<{ sandboxSession: unknown; workDir: string }> = []
    const sandbox = createCordonHarnessSandbox(provider)
    const agent = new HarnessAgent({ harness: scriptedShellHarness(started), sandbox })

    const session = await agent.createSession({ sessionId: 'run-1' })
    const first = started[0]!.sandboxSession as CordonHarnessSession
    // The harness made the session's work directory under the sandbox's default one.
    expect(started[0]!.workDir).toBe(`${first.defaultWorkingDirectory}/${HARNESS_ID}-run-1`)

    const result = await agent.generate({
      session,
      prompt: 'echo hello > greeting.txt; cat greeting.txt; id -u',
    })
    expect(result.text).toMatch(/^0:hello\n\d+\n$/)
    expect(result.text).not.toContain('\n0\n') // not root
    expect((await first.sandbox.readFile(`${started[0]!.workDir}/greeting.txt`)).toString()).toBe(
      'hello\n',
    )
    // The bootstrap recipe ran through the provider's session before the adapter started.
    expect(
      (
        await first.sandbox.readFile(`${first.defaultWorkingDirectory}/.scripted-shell/version`)
      ).toString(),
    ).toBe('1\n')

    const parked = await session.detach()
    expect(first.sandbox.status).not.toBe('destroyed')
    const resumed = await agent.createSession({ sessionId: 'run-1', resumeFrom: parked })
    expect(started[1]!.sandboxSession).toBe(first)
    const again = await agent.generate({ session: resumed, prompt: 'cat greeting.txt' })
    expect(again.text).toBe('0:hello\n')

    // Another process (here: another provider instance) cannot find the sandbox again.
    const elsewhere = new HarnessAgent({
      harness: scriptedShellHarness([]),
      sandbox: createCordonHarnessSandbox(provider),
    })
    // (@ai-sdk/harness bundles the error class into each entry point: match it by its marker.)
    const refused = await elsewhere
      .createSession({ sessionId: 'run-1', resumeFrom: parked })
      .catch((error: unknown) => error)
    expect(HarnessCapabilityUnsupportedError.isInstance(refused)).toBe(true)

    await resumed.destroy()
    expect(first.sandbox.status).toBe('destroyed')
  })
})
