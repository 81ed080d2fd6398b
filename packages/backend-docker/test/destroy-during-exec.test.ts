import { type CordonSandboxProvider, SandboxDestroyedError, type SandboxEvent } from '@cordon/core'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { explainLostCommand } from '../src/end-reason.js'
import type { EngineEvents } from '../src/engine-events.js'
import { testProvider } from './test-run.js'

/**
 * A destroy kills the container with SIGKILL (exit 137), as the host's OOM
 * killer does. A command it cuts short fails with `SandboxDestroyedError`
 * (the sandbox was destroyed under it), never reported as killed for memory:
 * no `oomKilled`, no `oom` event (which would also count in
 * `cordon.sandbox.oom_kills`). Before the fix, most such commands resolved
 * `{ exitCode: 137, oomKilled: true, stdout: '' }` and an `oom` event followed
 * `destroy.end`.
 */
const ROUNDS = 4

async function startedCommand(
  provider: CordonSandboxProvider,
  options: { lifetimeMs?: number } = {},
) {
  const sandbox = await provider.create({ memoryLimitMb: 512, ...options })
  const streamed: string[] = []
  let onStarted: () => void = () => {}
  const started = new Promise<void>((resolve) => {
    onStarted = resolve
  })
  const ending = sandbox
    .exec('sh', ['-c', 'echo started; sleep 30'], {
      timeout: 60_000,
      onOutput: (chunk) => {
        streamed.push(chunk.data)
        if (streamed.join('').includes('started\n')) onStarted()
      },
    })
    .then(
      (result) => ({ result }),
      (error: unknown) => ({ error }),
    )
  await started
  return { sandbox, ending, streamed }
}

describe.each(['runc', 'runsc'] as const)('a command the host ends (%s)', (runtime) => {
  const events: SandboxEvent[] = []
  let provider: CordonSandboxProvider
  beforeAll(() => {
    provider = testProvider({ runtime }, { onEvent: (event) => events.push(event) })
  })
  afterAll(async () => {
    await provider.close()
  })

  const oomEventsOf = async (sandboxId: string) => {
    // An `oom` event came after `destroy.end` (the explanation waits for the engine's events).
    await new Promise((resolve) => setTimeout(resolve, 1_500))
    return events.filter(
      (event) =>
        event.sandboxId === sandboxId && event.type === 'lifecycle' && event.phase === 'oom',
    )
  }

  it('destroyed during an exec: the exec fails with SandboxDestroyedError, never oomKilled, and no oom event', {
    timeout: 120_000,
  }, async () => {
    for (let round = 0; round < ROUNDS; round++) {
      const { sandbox, ending, streamed } = await startedCommand(provider)
      await sandbox.destroy()
      const ended = await ending
      expect(streamed.join('')).toBe('started\n')
      expect('result' in ended ? ended.result : undefined).toBeUndefined()
      expect('error' in ended && SandboxDestroyedError.isInstance(ended.error)).toBe(true)
      expect(await oomEventsOf(sandbox.id)).toEqual([])
      expect(sandbox.endReason).toBe('destroyed')
    }
  })

  it('ended by its lifetime during an exec: no oomKilled, no oom event', {
    timeout: 60_000,
  }, async () => {
    const { sandbox, ending } = await startedCommand(provider, { lifetimeMs: 2_000 })
    const ended = await ending
    expect('error' in ended && SandboxDestroyedError.isInstance(ended.error)).toBe(true)
    expect(await oomEventsOf(sandbox.id)).toEqual([])
    expect(sandbox.endReason).toBe('lifetime')
  })

  it("ended by its provider's close() during an exec: no oomKilled, no oom event", {
    timeout: 60_000,
  }, async () => {
    const closeEvents: SandboxEvent[] = []
    const closing = testProvider({ runtime }, { onEvent: (event) => closeEvents.push(event) })
    const { sandbox, ending } = await startedCommand(closing)
    await closing.close()
    const ended = await ending
    expect('error' in ended && SandboxDestroyedError.isInstance(ended.error)).toBe(true)
    await new Promise((resolve) => setTimeout(resolve, 1_500))
    expect(
      closeEvents.filter((event) => event.type === 'lifecycle' && event.phase === 'oom'),
    ).toEqual([])
    expect(sandbox.endReason).toBe('provider-closed')
  })
})

describe('explainLostCommand', () => {
  it('a container the engine was asked to kill is no OOM kill, though the release forgot the kill meanwhile', async () => {
    // The engine's events for a destroy: `kill`, then `die` with 137; the
    // release then forgets the container while the OOM grace still runs.
    let killed = true
    const events = {
      oomSince: async () => {
        await new Promise((resolve) => setTimeout(resolve, 50))
        return false
      },
      exitCode: async () => {
        // The release's forget, soon after the `die`.
        setTimeout(() => {
          killed = false
        }, 10)
        return 137
      },
      killRequested: () => killed,
    } as unknown as EngineEvents
    expect(await explainLostCommand(events, 'container', Date.now())).toBeUndefined()
  })
})
