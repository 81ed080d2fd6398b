import { describe, expect, it } from 'vitest'
import { composeProvider, prepareProviderConfig, sleep } from '../src/backend-kit.js'
import {
  SandboxAbortedError,
  SandboxConfigValidationError,
  SandboxError,
  type SandboxEvent,
} from '../src/index.js'
import { RECORDING, RecordingBackend, type RecordingProviderConfig } from './memory-backend.js'

function makeProvider(extra: Partial<RecordingProviderConfig> = {}) {
  const backend = new RecordingBackend()
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
  let loads = 0
  const provider = composeProvider({
    ...prepared,
    loadBackend: async () => {
      loads++
      return backend
    },
  })
  return { provider, backend, events, loads: () => loads }
}

describe('composeProvider', () => {
  it('does no work at construction and loads the backend once, on first create', async () => {
    const { provider, loads } = makeProvider()
    expect(loads()).toBe(0)
    await provider.create()
    await provider.create()
    expect(loads()).toBe(1)
    // The reference's provider naming; the instance id is what owner labels carry.
    expect(provider.id).toBe('cordon-test-recording')
    expect(provider.name).toBe('@cordon/sandbox: test:recording')
    // The environment is the backend's declared one, never a fixed value.
    expect(provider.environment).toBe('basic')
    expect(provider.backend).toBe('test:recording')
    expect(provider.enforcement).toBe(RECORDING.enforcement)
    expect(provider.instanceId).toMatch(/^prv_/)
    await provider.close()
  })

  it('applies provider defaults and lets per-call values win', async () => {
    const { provider, backend } = makeProvider({
      defaultMemoryLimitMb: 256,
      defaultMaxProcesses: 32,
      defaultEgress: { kind: 'allow-all' },
    })
    await provider.create()
    await provider.create({ memoryLimitMb: 128, env: { A: '1' }, egress: { kind: 'deny-all' } })
    expect(backend.requests[0]).toMatchObject({
      memoryLimitMb: 256,
      maxProcesses: 32,
      egress: { kind: 'allow-all' },
      env: {},
    })
    expect(backend.requests[1]).toMatchObject({
      memoryLimitMb: 128,
      maxProcesses: 32,
      egress: { kind: 'deny-all' },
      env: { A: '1' },
    })
    expect(backend.requests[0]?.sandboxId).not.toBe(backend.requests[1]?.sandboxId)
    await provider.close()
  })

  it('defaults egress to deny-all', async () => {
    const { provider, backend } = makeProvider()
    await provider.create()
    expect(backend.requests[0]?.egress).toEqual({ kind: 'deny-all' })
    await provider.close()
  })

  it('validates per-call config and reports every problem', async () => {
    const { provider } = makeProvider()
    const error = await provider
      .create({ memoryLimitMb: 0, env: { 'BAD-NAME': 'x' }, workingDirectory: '' })
      .catch((caught: unknown) => caught)
    expect(SandboxConfigValidationError.isInstance(error)).toBe(true)
    expect((error as SandboxConfigValidationError).issues).toHaveLength(3)
    expect((error as SandboxConfigValidationError).issues).toContainEqual({
      path: 'env.BAD-NAME',
      message: 'environment variable names are letters, digits and "_"',
    })
  })

  it('honours an already aborted signal', async () => {
    const { provider, backend } = makeProvider()
    const controller = new AbortController()
    controller.abort()
    await expect(provider.create({ signal: controller.signal })).rejects.toBeInstanceOf(
      SandboxAbortedError,
    )
    expect(backend.requests).toHaveLength(0)
  })

  it('emits lifecycle events with timings, including failures', async () => {
    const { provider, backend, events } = makeProvider()
    const sandbox = await provider.create()
    await sandbox.destroy()
    await sandbox.destroy()
    backend.failNext = true
    await expect(provider.create()).rejects.toThrow('create failed')
    expect(events.map((event) => (event.type === 'lifecycle' ? event.phase : event.type))).toEqual([
      'create.start',
      'create.ready',
      'destroy.start',
      'destroy.end',
      'create.start',
      'create.failed',
    ])
    const ready = events[1]
    expect(ready?.type === 'lifecycle' && typeof ready.durationMs === 'number').toBe(true)
  })

  it("reads create's timeoutMs as the default exec timeout (the reference's meaning), not a lifetime", async () => {
    const { provider, backend } = makeProvider({ defaultTimeoutMs: 7_000 })
    const sandbox = await provider.create({ timeoutMs: 30 })
    await sleep(120)
    expect(sandbox.status).toBe('ready')
    await sandbox.exec('a')
    await sandbox.exec('b', [], { timeout: 5 })
    const plain = await provider.create()
    await plain.exec('c')
    expect(backend.execOptions.map((options) => options.timeout)).toEqual([30, 5, 7_000])
    const fallback = makeProvider()
    await (await fallback.provider.create()).exec('d')
    expect(fallback.backend.execOptions[0]?.timeout).toBe(30_000)
    await provider.close()
    await fallback.provider.close()
  })

  it('reports busy while an exec runs', async () => {
    const { provider, backend } = makeProvider()
    backend.execDelayMs = 50
    const sandbox = await provider.create()
    expect(sandbox.status).toBe('ready')
    const running = sandbox.exec('slow')
    expect(sandbox.status).toBe('busy')
    await running
    expect(sandbox.status).toBe('ready')
    await provider.close()
  })

  it('refuses unknown keys in provider and create config', async () => {
    expect(() =>
      prepareProviderConfig(
        {
          backend: { tier: 'test' },
          layout: { outputs: { source: { type: 'ephemeral' } } },
          readyTimeout: 5,
        } as unknown as RecordingProviderConfig,
        [RECORDING],
      ),
    ).toThrow(/readyTimeout/)
    const { provider } = makeProvider()
    await expect(
      provider.create({ lifetime: 5 } as unknown as Parameters<typeof provider.create>[0]),
    ).rejects.toThrow(/lifetime/)
  })

  it('closes on scope exit with await using', async () => {
    const { provider, backend } = makeProvider()
    let id = ''
    {
      await using scoped = provider
      await using sandbox = await scoped.create()
      id = sandbox.id
    }
    expect(backend.destroyed).toEqual([id])
    await expect(provider.create()).rejects.toThrow('closed')
  })

  it('destroys a sandbox when its lifetime runs out', async () => {
    const { provider, backend, events } = makeProvider()
    const sandbox = await provider.create({ lifetimeMs: 30 })
    await sleep(120)
    expect(backend.destroyed).toEqual([sandbox.id])
    expect(sandbox.status).toBe('destroyed')
    expect(events.some((event) => event.type === 'lifecycle' && event.phase === 'expired')).toBe(
      true,
    )
  })

  it('keeps a warm pool: claims are pre-created, never reused, and refilled', async () => {
    const { provider, backend, events } = makeProvider({ pool: { size: 2 } })
    await provider.warm()
    expect(backend.requests).toHaveLength(2)
    const first = await provider.create()
    expect(backend.requests.map((request) => request.sandboxId)).toContain(first.id)
    expect(events.some((event) => event.type === 'lifecycle' && event.phase === 'pool.claim')).toBe(
      true,
    )
    await provider.warm()
    expect(backend.requests).toHaveLength(3)
    const second = await provider.create()
    expect(second.id).not.toBe(first.id)
    // A per-call setting bypasses the pool rather than handing out a sandbox made for other settings.
    const custom = await provider.create({ env: { X: '1' } })
    expect(backend.requests.at(-1)?.sandboxId).toBe(custom.id)
    await provider.close()
    expect(new Set(backend.destroyed)).toEqual(
      new Set(backend.requests.map((request) => request.sandboxId)),
    )
  })

  it('close destroys every live sandbox and refuses new ones', async () => {
    const { provider, backend } = makeProvider()
    const a = await provider.create()
    const b = await provider.create()
    await provider.close()
    expect(backend.destroyed.sort()).toEqual([a.id, b.id].sort())
    await expect(provider.create()).rejects.toThrow('closed')
  })

  it('close waits for a create in flight, destroys what it makes and rejects it', async () => {
    const { provider, backend, events } = makeProvider()
    backend.createDelayMs = 150
    const settled: string[] = []
    const pending = provider.create().then(
      (sandbox) => {
        settled.push('create resolved')
        return sandbox
      },
      (error: unknown) => {
        settled.push('create rejected')
        throw error
      },
    )
    await sleep(20)
    await provider.close()
    settled.push('close resolved')
    const error = await pending.catch((caught: unknown) => caught)
    expect(SandboxError.isInstance(error)).toBe(true)
    expect((error as Error).message).toContain('provider is closed')
    expect(settled).toEqual(['create rejected', 'close resolved'])
    expect(backend.requests).toHaveLength(1)
    expect(backend.destroyed).toEqual([backend.requests[0]?.sandboxId])
    const phases = events.flatMap((event) => (event.type === 'lifecycle' ? [event.phase] : []))
    expect(phases).toEqual(['create.start', 'create.failed'])
  })

  it('close waits for a warm-pool fill and a create in flight and leaves nothing', async () => {
    const { provider, backend } = makeProvider({ pool: { size: 1 } })
    backend.createDelayMs = 150
    // Nothing is warm yet: the create makes its own sandbox and starts a fill beside it.
    const pending = provider.create().catch((caught: unknown) => caught)
    await sleep(20)
    expect(backend.requests).toHaveLength(2)
    await provider.close()
    expect(SandboxError.isInstance(await pending)).toBe(true)
    expect(new Set(backend.destroyed)).toEqual(
      new Set(backend.requests.map((request) => request.sandboxId)),
    )
  })
})
