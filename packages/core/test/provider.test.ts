import { describe, expect, it } from 'vitest'
import {
  composeProvider,
  prepareProviderConfig,
  SandboxAbortedError,
  SandboxConfigValidationError,
  type SandboxEvent,
  type SandboxProviderConfig,
  sleep,
} from '../src/index.js'
import { RecordingBackend } from './memory-backend.js'

function makeProvider(extra: Partial<SandboxProviderConfig> = {}) {
  const backend = new RecordingBackend()
  const events: SandboxEvent[] = []
  const prepared = prepareProviderConfig({
    backend: { tier: 'container', image: 'img' },
    layout: { outputs: { source: { kind: 'ephemeral' } } },
    onEvent: (event) => events.push(event),
    ...extra,
  } as SandboxProviderConfig)
  let loads = 0
  const provider = composeProvider({
    config: prepared.config,
    backendName: prepared.backendName,
    layout: prepared.layout,
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
    expect(provider.id).toMatch(/^prv_/)
    expect(provider.name).toBe('container:docker')
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
    expect(backend.requests[0]?.id).not.toBe(backend.requests[1]?.id)
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
      .create({ memoryLimitMb: 0, env: { 'BAD-NAME': 'x' }, workingDirectory: 'rel' })
      .catch((caught: unknown) => caught)
    expect(SandboxConfigValidationError.isInstance(error)).toBe(true)
    expect((error as SandboxConfigValidationError).issues).toHaveLength(3)
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

  it('destroys a sandbox when its lifetime runs out', async () => {
    const { provider, backend, events } = makeProvider()
    const sandbox = await provider.create({ timeoutMs: 30 })
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
    expect(backend.requests.map((request) => request.id)).toContain(first.id)
    expect(events.some((event) => event.type === 'lifecycle' && event.phase === 'pool.claim')).toBe(
      true,
    )
    await provider.warm()
    expect(backend.requests).toHaveLength(3)
    const second = await provider.create()
    expect(second.id).not.toBe(first.id)
    // A per-call setting bypasses the pool rather than handing out a sandbox made for other settings.
    const custom = await provider.create({ env: { X: '1' } })
    expect(backend.requests.at(-1)?.id).toBe(custom.id)
    await provider.close()
    expect(new Set(backend.destroyed)).toEqual(
      new Set(backend.requests.map((request) => request.id)),
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
})
