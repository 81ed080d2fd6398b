import {
  type HarnessAgentAdapter,
  prepareHarnessSandboxTemplate,
  prepareSandboxForHarness,
} from '@ai-sdk/harness/agent'
import { afterAll, describe, expect, it } from 'vitest'
import { type CordonHarnessSession, createCordonHarnessSandbox } from '../src/index.js'
import { testProvider } from './test-run.js'

const provider = testProvider()
afterAll(async () => {
  await provider.close()
})

/**
 * An adapter that only declares a bootstrap recipe: enough for the harness's
 * own preparation code to create a session through the provider, write the
 * recipe's files, run its commands and leave its marker. It never starts an
 * agent (nothing here calls `doStart`).
 */
function recipeAdapter(): HarnessAgentAdapter {
  return {
    specificationVersion: 'harness-v1',
    harnessId: 'cordon-probe',
    builtinTools: {},
    getBootstrap: async () => ({
      harnessId: 'cordon-probe',
      bootstrapDir: '.cordon-probe',
      files: [{ path: '.cordon-probe/bridge.sh', content: 'echo bridge ready\n' }],
      commands: [{ command: 'sh bridge.sh > started.txt && pwd >> started.txt' }],
    }),
    doStart: async () => {
      throw new Error('this adapter only declares a bootstrap recipe')
    },
  }
}

describe('the harness prepares a cordon sandbox with its own bootstrap code', () => {
  it('prepareHarnessSandboxTemplate creates a session through the provider, bootstraps it, and stops it', async () => {
    const harnessProvider = createCordonHarnessSandbox(provider)
    const created: CordonHarnessSession[] = []
    const recording = {
      ...harnessProvider,
      createSession: async (options?: Parameters<typeof harnessProvider.createSession>[0]) => {
        const session = (await harnessProvider.createSession(options)) as CordonHarnessSession
        created.push(session)
        return session
      },
    }
    let seen: { started: string | null; files: string } | undefined
    await prepareHarnessSandboxTemplate({
      harness: recipeAdapter(),
      sandboxProvider: recording,
      sandboxConfig: {
        bootstrapHash: 'v1',
        // Runs inside the provider's createSession (onFirstCreate), after the recipe.
        onBootstrap: async ({ session }) => {
          seen = {
            started: await session.readTextFile({ path: '.cordon-probe/started.txt' }),
            files: (await session.run({ command: 'ls -A .cordon-probe' })).stdout,
          }
        },
      },
    })
    expect(created).toHaveLength(1)
    const root = created[0]!.defaultWorkingDirectory
    expect(seen?.started).toBe(`bridge ready\n${root}/.cordon-probe\n`)
    expect(seen?.files).toContain('bridge.sh')
    // The template session was stopped: cordon removed the sandbox.
    expect(created[0]!.sandbox.status).toBe('destroyed')
  })

  it('prepareSandboxForHarness applies the recipe to a live session, once', async () => {
    const session = (await createCordonHarnessSandbox(
      provider,
    ).createSession()) as CordonHarnessSession
    try {
      const first = await prepareSandboxForHarness({
        session: session.restricted(),
        harnesses: [recipeAdapter()],
      })
      expect(first.recipeIdentities['cordon-probe']).toBeTypeOf('string')
      await session.run({ command: 'echo extra >> .cordon-probe/started.txt' })
      // Applied again, the marker makes the recipe a no-op: the commands do not run twice.
      await prepareSandboxForHarness({
        session: session.restricted(),
        harnesses: [recipeAdapter()],
      })
      const started = await session.readTextFile({ path: '.cordon-probe/started.txt' })
      expect(started).toBe(
        `bridge ready\n${session.defaultWorkingDirectory}/.cordon-probe\nextra\n`,
      )
    } finally {
      await session.destroy()
    }
  })
})
