import { describe, expect, it } from 'vitest'
import { z } from 'zod'
import { composeProvider, defineBackend, prepareProviderConfig } from '../src/backend-kit.js'
import {
  type SandboxBackendOptions,
  SandboxConfigValidationError,
  SandboxControlRefusedError,
  type SandboxEnforcementDeclaration,
} from '../src/index.js'
import {
  RecordingBackend,
  type RecordingConfig,
  type RecordingProviderConfig,
  recordingDefinition,
} from './memory-backend.js'

/** A provider on the recording backend declaring `enforcement`. */
function providerDeclaring(
  enforcement: Partial<SandboxEnforcementDeclaration>,
  extra: Partial<RecordingProviderConfig> = {},
) {
  const definition = recordingDefinition(enforcement)
  const backend = new RecordingBackend(definition)
  const prepared = prepareProviderConfig<RecordingConfig>({ backend: { tier: 'test' }, ...extra }, [
    definition,
  ])
  const provider = composeProvider({ ...prepared, loadBackend: async () => backend })
  return { provider, backend }
}

describe('declared enforcement', () => {
  it('passes no limit a backend does not enforce, and the backend applies none', async () => {
    const { provider, backend } = providerDeclaring({ memoryLimit: false, processLimit: false })
    const sandbox = await provider.create()
    const request: SandboxBackendOptions = backend.requests[0]!
    expect(request.memoryLimitMb).toBeUndefined()
    expect(request.maxProcesses).toBeUndefined()
    expect(sandbox.enforced.limits).toEqual({})
    await provider.close()
  })

  it('lets an enforcing backend apply the reference defaults itself', async () => {
    const { provider, backend } = providerDeclaring({})
    await provider.create()
    // The provider passes only what the host named...
    expect(backend.requests[0]?.memoryLimitMb).toBeUndefined()
    // ...and the backend's resolveBackendOptions fills the reference's defaults.
    expect(backend.resolved[0]).toMatchObject({ memoryLimitMb: 512, maxProcesses: 32 })
    await provider.close()
  })

  it('refuses a limit named at create that the backend cannot enforce, starting nothing', async () => {
    const { provider, backend } = providerDeclaring({ memoryLimit: false, processLimit: false })
    const memory = await provider.create({ memoryLimitMb: 64 }).catch((error: unknown) => error)
    expect(SandboxControlRefusedError.isInstance(memory)).toBe(true)
    expect(memory).toMatchObject({ control: 'memoryLimitMb', backend: 'test:recording' })
    const processes = await provider.create({ maxProcesses: 8 }).catch((error: unknown) => error)
    expect(processes).toMatchObject({ control: 'maxProcesses', backend: 'test:recording' })
    expect(backend.requests).toHaveLength(0)
    await provider.close()
  })

  it('refuses a provider default the backend cannot enforce when the provider is built', () => {
    expect(() => providerDeclaring({ memoryLimit: false }, { defaultMemoryLimitMb: 256 })).toThrow(
      SandboxControlRefusedError,
    )
    try {
      providerDeclaring({ processLimit: false }, { defaultMaxProcesses: 16 })
    } catch (error) {
      expect(error).toMatchObject({ control: 'defaultMaxProcesses', backend: 'test:recording' })
    }
    expect(() =>
      providerDeclaring({ egress: ['deny-all'] }, { defaultEgress: { kind: 'allow-all' } }),
    ).toThrow(/egress\.allow-all/)
  })

  it('refuses an egress kind the backend does not enforce at create', async () => {
    const { provider } = providerDeclaring({ egress: ['deny-all'] })
    await expect(
      provider.create({ egress: { kind: 'static', allowedHosts: ['example.com'] } }),
    ).rejects.toMatchObject({ control: 'egress.static' })
    await provider.close()
  })

  it('refuses when the backend is called directly too (resolveBackendOptions)', async () => {
    const backend = new RecordingBackend(recordingDefinition({ memoryLimit: false }))
    await expect(
      backend.create({ workingDirectory: '.', memoryLimitMb: 64 }),
    ).rejects.toBeInstanceOf(SandboxControlRefusedError)
  })

  it('refuses the default deny-all when a backend that cannot enforce it is called directly with no egress', async () => {
    const backend = new RecordingBackend(recordingDefinition({ egress: ['allow-all'] }))
    const refused = await backend.create({ workingDirectory: '.' }).catch((error: unknown) => error)
    expect(SandboxControlRefusedError.isInstance(refused)).toBe(true)
    expect(refused).toMatchObject({ control: 'egress.deny-all', backend: 'test:recording' })
    expect(backend.requests).toHaveLength(0)
    // Named, the kind it enforces goes through.
    await backend.create({ workingDirectory: '.', egress: { kind: 'allow-all' } })
    expect(backend.resolved[0]?.egress).toEqual({ kind: 'allow-all' })
  })

  it('reports what holds for a sandbox, the provider clocks included', async () => {
    const { provider } = providerDeclaring({}, { defaultIdleTimeoutMs: 60_000 })
    const sandbox = await provider.create({ lifetimeMs: 120_000, timeoutMs: 5_000 })
    expect(sandbox.enforced).toEqual({
      backend: 'test:recording',
      isolation: 'none',
      egress: { kind: 'deny-all' },
      limits: { memoryLimitMb: 512, maxProcesses: 32 },
      mounts: [],
      execTimeoutMs: 5_000,
      lifetimeMs: 120_000,
      idleTimeoutMs: 60_000,
    })
    expect(sandbox.environment).toBe('basic')
    await provider.close()
  })

  it('keeps only the usage fields the backend declares it measures', async () => {
    const { provider } = providerDeclaring({ measuredUsage: ['cpuTimeMs'] })
    const sandbox = await provider.create()
    const stats = await sandbox.stats()
    // The recording backend reports cpuTimeMs and a host-wide memoryBytes it does not declare.
    expect(stats.cpuTimeMs).toBe(7)
    expect(stats).not.toHaveProperty('memoryBytes')
    await provider.close()
  })
})

describe('defineBackend', () => {
  it('reports every problem of a malformed definition at once', () => {
    let thrown: unknown
    try {
      defineBackend({
        name: 'Local',
        tier: 'process',
        selects: () => true,
        configSchema: z.object({ tier: z.literal('process') }),
        layout: 'sometimes' as never,
        enforcement: { memoryLimit: 'yes' } as never,
        load: undefined as never,
      })
    } catch (error) {
      thrown = error
    }
    expect(SandboxConfigValidationError.isInstance(thrown)).toBe(true)
    const paths = (thrown as SandboxConfigValidationError).issues.map((issue) => issue.path)
    expect(paths).toEqual(
      expect.arrayContaining([
        'name',
        'load',
        'layout',
        'enforcement.memoryLimit',
        'enforcement.egress',
        'enforcement.environment',
      ]),
    )
  })

  it('picks the one definition that takes a config, and names the known ones otherwise', () => {
    const other = defineBackend({
      ...recordingDefinition(),
      name: 'other:one',
      tier: 'other',
      selects: (backend) => backend.tier === 'other',
    })
    expect(
      prepareProviderConfig({ backend: { tier: 'test' } }, [other, recordingDefinition()])
        .definition.name,
    ).toBe('test:recording')
    expect(() =>
      prepareProviderConfig({ backend: { tier: 'nope' } }, [other, recordingDefinition()]),
    ).toThrow(/"nope" is not implemented: the backends given are other:one, test:recording/)
  })
})
