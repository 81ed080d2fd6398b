import { describe, expect, it } from 'vitest'
import { composeProvider, prepareProviderConfig } from '../src/backend-kit.js'
import {
  type CordonBackendSandbox,
  SandboxConfigValidationError,
  SandboxControlRefusedError,
  type SandboxSnapshot,
  SandboxSnapshotNotFoundError,
} from '../src/index.js'
import {
  RecordingBackend,
  type RecordingProviderConfig,
  recordingDefinition,
} from './memory-backend.js'

const UNKNOWN = 'snp_aaaaaaaaaaaaaaaaaaaaaaaaaa'

/** The provider side of snapshots and fork, over a backend whose snapshots only record. */
function makeProvider(
  declared: { snapshot: boolean; memorySnapshot: boolean },
  refusesMemory = false,
) {
  const definition = recordingDefinition(declared)
  const backend = new RecordingBackend(definition)
  const kept = new Map<string, SandboxSnapshot>()
  const removed: string[] = []
  const create = backend.create.bind(backend)
  backend.create = async (options) => {
    const made: CordonBackendSandbox = await create(options)
    return Object.assign(made, {
      snapshot: async (snapshotOptions: { memory?: boolean } = {}) => {
        if (refusesMemory && snapshotOptions.memory)
          throw new SandboxControlRefusedError('snapshot.memory', backend.name, 'not this sandbox')
        const taken: SandboxSnapshot = {
          id: `snp_${'b'.repeat(25)}${kept.size + 2}`,
          createdAt: Date.now(),
          sizeBytes: 1,
          memory: snapshotOptions.memory === true,
          backend: backend.name,
          sourceSandboxId: made.id,
          limits: { memoryLimitMb: 77 },
          egress: { kind: 'deny-all' },
        }
        kept.set(taken.id, taken)
        return taken
      },
    })
  }
  Object.assign(backend, {
    snapshots: {
      get: async (id: string) => {
        const found = kept.get(id)
        if (!found) throw new SandboxSnapshotNotFoundError(id, backend.name)
        return found
      },
      list: async () => [...kept.values()],
      remove: async (id: string) => {
        removed.push(id)
        kept.delete(id)
      },
    },
  })
  const prepared = prepareProviderConfig(
    {
      backend: { tier: 'test' },
      layout: { outputs: { source: { type: 'ephemeral' } } },
    } as RecordingProviderConfig,
    [definition],
  )
  const provider = composeProvider({ ...prepared, loadBackend: async () => backend })
  return { provider, backend, kept, removed }
}

describe('snapshots and fork (the provider side)', () => {
  it('refuses every snapshot call naming the control where the backend declares none', async () => {
    const { provider, backend } = makeProvider({ snapshot: false, memorySnapshot: false })
    const sandbox = await provider.create()
    const outcomes = [
      ['snapshot', await sandbox.snapshot().catch((error: unknown) => error)],
      ['fork', await sandbox.fork({ count: 1 }).catch((error: unknown) => error)],
      ['snapshot', await provider.create({ snapshot: UNKNOWN }).catch((error: unknown) => error)],
      ['snapshot', await provider.snapshots.list().catch((error: unknown) => error)],
    ] as const
    for (const [control, error] of outcomes) {
      expect(SandboxControlRefusedError.isInstance(error)).toBe(true)
      expect(error).toMatchObject({ control, backend: 'test:recording' })
    }
    // Nothing reached the backend but the one create.
    expect(backend.requests).toHaveLength(1)
    await provider.close()
  })

  it('refuses memory where only files are declared, and a fork count out of range', async () => {
    const { provider } = makeProvider({ snapshot: true, memorySnapshot: false })
    const sandbox = await provider.create()
    const memory = await sandbox.snapshot({ memory: true }).catch((error: unknown) => error)
    expect(memory).toMatchObject({ control: 'snapshot.memory' })
    const forkMemory = await sandbox
      .fork({ count: 1, memory: true })
      .catch((error: unknown) => error)
    expect(forkMemory).toMatchObject({ control: 'fork' })
    for (const count of [0, 17, 1.5, Number.NaN]) {
      const error = await sandbox.fork({ count }).catch((caught: unknown) => caught)
      expect(SandboxConfigValidationError.isInstance(error)).toBe(true)
    }
    await provider.close()
  })

  it('refuses options it does not know and a memory that is not a boolean, capturing nothing', async () => {
    const { provider, backend, kept } = makeProvider({ snapshot: true, memorySnapshot: true })
    const sandbox = await provider.create()
    const calls = [
      () => sandbox.snapshot({ memory: 'yes' } as never),
      () => sandbox.snapshot({ memmory: true } as never),
      () => sandbox.fork({ count: 1, memory: 1 } as never),
      () => sandbox.fork({ count: 1, name: 'copy' } as never),
      () => sandbox.fork(undefined as never),
    ]
    for (const call of calls) {
      const error = await call().catch((caught: unknown) => caught)
      expect(SandboxConfigValidationError.isInstance(error), String(error)).toBe(true)
    }
    const both = await sandbox
      .snapshot({ memory: 'yes', extra: 1 } as never)
      .catch((caught: unknown) => caught)
    expect((both as SandboxConfigValidationError).issues.map((issue) => issue.path)).toEqual([
      'extra',
      'memory',
    ])
    // Nothing reached the backend but the one create.
    expect(backend.requests).toHaveLength(1)
    expect(kept.size).toBe(0)
    await provider.close()
  })

  it('creates from a snapshot with its limits unless the call names its own', async () => {
    const { provider, backend } = makeProvider({ snapshot: true, memorySnapshot: false })
    const source = await provider.create()
    const taken = await source.snapshot()
    await provider.create({ snapshot: taken.id })
    await provider.create({ snapshot: taken.id, memoryLimitMb: 99 })
    expect(backend.requests.at(-2)).toMatchObject({ snapshot: taken.id, memoryLimitMb: 77 })
    expect(backend.requests.at(-1)).toMatchObject({ snapshot: taken.id, memoryLimitMb: 99 })
    const unknown = await provider.create({ snapshot: UNKNOWN }).catch((error: unknown) => error)
    expect(SandboxSnapshotNotFoundError.isInstance(unknown)).toBe(true)
    await provider.close()
  })

  it('a fork that cannot make every sandbox hands out none, destroys those made and removes its snapshot', async () => {
    const { provider, backend, removed } = makeProvider({ snapshot: true, memorySnapshot: false })
    const source = await provider.create()
    const create = backend.create.bind(backend)
    let calls = 0
    backend.create = async (options) => {
      calls++
      if (calls === 2) throw new Error('the engine said no')
      return create(options)
    }
    const error = await source.fork({ count: 3 }).catch((caught: unknown) => caught)
    expect(String(error)).toContain('the engine said no')
    expect(backend.destroyed).toHaveLength(2)
    expect(removed).toHaveLength(1)
    expect(source.status).toBe('ready')
    // A fork that works hands out independent sandboxes and removes its snapshot too.
    backend.create = create
    const forks = await source.fork({ count: 2 })
    expect(new Set(forks.map((fork) => fork.id)).size).toBe(2)
    expect(removed).toHaveLength(2)
    await provider.close()
  })

  it('fork without memory named takes memory where the backend can checkpoint the sandbox, and files where it refuses; one that names memory is refused', async () => {
    const { provider, kept } = makeProvider({ snapshot: true, memorySnapshot: true }, true)
    const source = await provider.create()
    const forks = await source.fork({ count: 1 })
    expect(forks).toHaveLength(1)
    const refused = await source.fork({ count: 1, memory: true }).catch((error: unknown) => error)
    expect(SandboxControlRefusedError.isInstance(refused)).toBe(true)
    expect((refused as SandboxControlRefusedError).control).toBe('snapshot.memory')
    expect(kept.size).toBe(0)
    await provider.close()
  })
})
