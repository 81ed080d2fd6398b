import { describe, expect, it } from 'vitest'
import { composeProvider, prepareProviderConfig, sleep } from '../src/backend-kit.js'
import {
  type CordonBackendSandbox,
  SandboxControlRefusedError,
  SandboxDestroyedError,
  type SandboxEvent,
  SandboxPausedError,
} from '../src/index.js'
import { RECORDING, RecordingBackend, type RecordingProviderConfig } from './memory-backend.js'

/** A backend sandbox with a freezer that only records (the real one is the Docker backend's). */
function freezable(sandbox: CordonBackendSandbox, calls: string[]): CordonBackendSandbox {
  return Object.assign(sandbox, {
    pause: async () => {
      calls.push('pause')
    },
    resume: async () => {
      calls.push('resume')
    },
  })
}

function makeProvider(
  extra: Partial<RecordingProviderConfig> = {},
  decorate?: (sandbox: CordonBackendSandbox) => CordonBackendSandbox,
) {
  const backend = new RecordingBackend()
  const calls: string[] = []
  const create = backend.create.bind(backend)
  backend.create = async (options) => {
    const made = await create(options)
    return decorate ? decorate(made) : freezable(made, calls)
  }
  const events: SandboxEvent[] = []
  const prepared = prepareProviderConfig(
    {
      backend: { tier: 'test' },
      layout: { outputs: { source: { type: 'ephemeral' } } },
      onEvent: (event) => events.push(event),
      ...extra,
    } as RecordingProviderConfig,
    [RECORDING],
  )
  const provider = composeProvider({
    ...prepared,
    loadBackend: async () => backend,
  })
  return { provider, backend, events, calls }
}

const phases = (events: SandboxEvent[]) =>
  events.flatMap((event) => (event.type === 'lifecycle' ? [event.phase] : []))

describe('pause and resume (the provider side)', () => {
  it('reports paused, refuses calls that need the processes, and reports both phases', async () => {
    const { provider, events, calls } = makeProvider()
    const sandbox = await provider.create()
    expect(sandbox.status).toBe('ready')
    await sandbox.pause()
    expect(sandbox.paused).toBe(true)
    expect(sandbox.status).toBe('busy')
    // A second pause does nothing.
    await sandbox.pause()
    expect(calls).toEqual(['pause'])
    const refused = [
      sandbox.exec('true'),
      sandbox.start('true'),
      sandbox.writeFile('a', 'b'),
      sandbox.readFile('a'),
      sandbox.listFiles(),
      sandbox.writeFileStream('a', (async function* () {})()),
      sandbox.readFileStream('a'),
      sandbox.openTerminal({ size: { cols: 80, rows: 24 } }),
    ]
    for (const call of refused) {
      const error = await call.then(
        () => undefined,
        (caught: unknown) => caught,
      )
      expect(SandboxPausedError.isInstance(error)).toBe(true)
      expect((error as SandboxPausedError).sandboxId).toBe(sandbox.id)
    }
    const execRefusal = (await sandbox.exec('true').catch((error: unknown) => error)) as Error
    expect(execRefusal.message).toBe(
      `exec refused: sandbox ${sandbox.id} is paused; call resume() first`,
    )
    await sandbox.resume()
    expect(sandbox.status).toBe('ready')
    expect((await sandbox.exec('echo')).stdout).toBe('echo')
    // Resuming a running sandbox does nothing.
    await sandbox.resume()
    expect(calls).toEqual(['pause', 'resume'])
    const pause = events.find((event) => event.type === 'lifecycle' && event.phase === 'pause')
    const resume = events.find((event) => event.type === 'lifecycle' && event.phase === 'resume')
    expect(pause).toMatchObject({ sandboxId: sandbox.id, backend: 'test:recording' })
    expect(typeof (pause as { durationMs?: number }).durationMs).toBe('number')
    expect((resume as { pausedMs?: number }).pausedMs).toBeGreaterThanOrEqual(0)
    await provider.close()
  })

  // Real timers, with room for a loaded machine: a sleep that wakes late
  // only eats into the margin before the next check (about half a second).
  it('does not count paused time toward the idle timeout', async () => {
    const { provider, events } = makeProvider()
    const sandbox = await provider.create({ idleTimeoutMs: 1_500 })
    await sleep(750)
    await sandbox.pause()
    await sleep(2_500)
    expect(sandbox.endReason).toBeUndefined()
    await sandbox.resume()
    // 750 ms of idleness were counted before the pause; about 750 more end it.
    await sleep(250)
    expect(sandbox.endReason).toBeUndefined()
    await sleep(2_000)
    expect(sandbox.endReason).toBe('idle')
    expect(phases(events)).toEqual(
      expect.arrayContaining(['pause', 'resume', 'idle', 'destroy.end']),
    )
    await provider.close()
  })

  it('moves the lifetime later by the time paused', async () => {
    const { provider } = makeProvider()
    const sandbox = await provider.create({ lifetimeMs: 2_000 })
    await sleep(1_000)
    await sandbox.pause()
    await sleep(2_500)
    expect(sandbox.endReason).toBeUndefined()
    await sandbox.resume()
    await sleep(400)
    expect(sandbox.endReason).toBeUndefined()
    await sleep(2_000)
    expect(sandbox.endReason).toBe('lifetime')
    await provider.close()
  })

  it('destroys a paused sandbox, and refuses to pause a destroyed one', async () => {
    const { provider, backend } = makeProvider()
    const sandbox = await provider.create()
    await sandbox.pause()
    await sandbox.destroy()
    expect(sandbox.status).toBe('destroyed')
    expect(backend.destroyed).toEqual([sandbox.id])
    const error = await sandbox.pause().catch((caught: unknown) => caught)
    expect(SandboxDestroyedError.isInstance(error)).toBe(true)
    await provider.close()
  })

  it('keeps the sandbox running and its clocks going when the freezer fails', async () => {
    const { provider, events } = makeProvider({}, (sandbox) =>
      Object.assign(sandbox, {
        pause: async () => {
          throw new Error('engine said no')
        },
        resume: async () => {},
      }),
    )
    const sandbox = await provider.create({ idleTimeoutMs: 200 })
    await expect(sandbox.pause()).rejects.toThrow('engine said no')
    expect(sandbox.status).toBe('ready')
    expect((await sandbox.exec('echo')).exitCode).toBe(0)
    const failed = events.find((event) => event.type === 'lifecycle' && event.phase === 'pause')
    expect((failed as { error?: { message: string } }).error?.message).toBe('engine said no')
    await sleep(500)
    expect(sandbox.endReason).toBe('idle')
    await provider.close()
  })

  it('is refused with a typed error naming the control and the backend where the backend cannot freeze', async () => {
    const { provider } = makeProvider({}, (sandbox) => sandbox)
    const sandbox = await provider.create()
    for (const [control, call] of [
      ['pause', () => sandbox.pause()],
      ['resume', () => sandbox.resume()],
    ] as const) {
      const error = await call().catch((caught: unknown) => caught)
      expect(SandboxControlRefusedError.isInstance(error)).toBe(true)
      expect(error).toMatchObject({ control, backend: 'test:recording' })
    }
    expect(sandbox.status).toBe('ready')
    await provider.close()
  })
})
