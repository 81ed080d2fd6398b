import { describe, expect, it } from 'vitest'
import { runCreateSequence } from '../src/backend-kit.js'
import { CreateStepTimer } from '../src/create-step-timer.js'
import { SandboxCreateTimeoutError, type SandboxEvent } from '../src/index.js'
import { newSandboxId } from '../src/sandbox-id.js'

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms))

function sequence(overrides: { cleanup?: () => Promise<void>; timeoutMs?: number } = {}) {
  const events: SandboxEvent[] = []
  const cleaned: string[] = []
  return {
    events,
    cleaned,
    options: {
      sandboxId: newSandboxId(),
      backend: 'test:recording',
      timeoutMs: overrides.timeoutMs ?? 1_000,
      signal: undefined,
      emit: (event: SandboxEvent) => events.push(event),
      firstStep: 'first',
      cleanup:
        overrides.cleanup ??
        (async () => {
          cleaned.push('cleanup')
        }),
      cleanupWhat: 'removing the thing',
    },
  }
}

describe('runCreateSequence', () => {
  it('names the step under way when the budget runs out, and cleans up', async () => {
    const { options, cleaned } = sequence({ timeoutMs: 100 })
    const error = await runCreateSequence(options, async ({ step }) => {
      step('waiting for the agent')
      await sleep(2_000)
      return { destroy: async () => {} }
    }).catch((caught: unknown) => caught)
    expect(SandboxCreateTimeoutError.isInstance(error)).toBe(true)
    expect(error).toMatchObject({ phase: 'waiting for the agent', timeoutMs: 100 })
    expect(cleaned).toEqual(['cleanup'])
  })

  it('reports a cleanup that fails as an event and throws the create error', async () => {
    const { options, events } = sequence({
      cleanup: async () => {
        throw new Error('engine gone')
      },
    })
    await expect(
      runCreateSequence(options, async () => {
        throw new Error('step failed')
      }),
    ).rejects.toThrow('step failed')
    expect(events).toEqual([
      expect.objectContaining({
        phase: 'create.failed',
        sandboxId: options.sandboxId,
        backend: 'test:recording',
        error: { name: 'CleanupError', message: 'removing the thing failed: engine gone' },
      }),
    ])
  })

  it('destroys a sandbox that arrives after the caller aborted', async () => {
    const controller = new AbortController()
    const { options } = sequence()
    let destroyed = false
    const pending = runCreateSequence({ ...options, signal: controller.signal }, async () => {
      await sleep(100)
      return {
        destroy: async () => {
          destroyed = true
        },
      }
    })
    controller.abort()
    await expect(pending).rejects.toThrow()
    await sleep(200)
    expect(destroyed).toBe(true)
  })
})

describe('create step timings', () => {
  it('tells onStep each step as it begins, the first included, a repeated name once', async () => {
    const { options } = sequence()
    const named: string[] = []
    await runCreateSequence(
      { ...options, onStep: (name) => named.push(name) },
      async ({ step }) => {
        step('creating the container')
        step('creating the container')
        step('waiting for the agent')
        return { destroy: async () => {} }
      },
    )
    expect(named).toEqual(['first', 'creating the container', 'waiting for the agent'])
  })

  it('CreateStepTimer adds up each step until the next begins, a step named again counted once', async () => {
    const timer = new CreateStepTimer()
    expect(timer.finish()).toBeUndefined()
    timer.begin('pulling')
    await sleep(60)
    timer.begin('starting')
    await sleep(30)
    timer.begin('pulling')
    await sleep(60)
    const steps = timer.finish()!
    expect(Object.keys(steps)).toEqual(['pulling', 'starting'])
    expect(steps.pulling).toBeGreaterThanOrEqual(110)
    expect(steps.starting).toBeGreaterThanOrEqual(25)
  })
})
