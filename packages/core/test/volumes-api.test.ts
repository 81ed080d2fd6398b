import { describe, expect, it } from 'vitest'
import {
  composeProvider,
  prepareProviderConfig,
  type SandboxBackendVolumes,
} from '../src/backend-kit.js'
import {
  ContainerSandboxLayoutValidationError,
  resolveLayout,
  SandboxConfigValidationError,
  SandboxControlRefusedError,
  type SandboxEnforcementDeclaration,
  type SandboxVolumeInfo,
} from '../src/index.js'
import {
  RecordingBackend,
  type RecordingConfig,
  type RecordingProviderConfig,
  recordingDefinition,
} from './memory-backend.js'

function providerDeclaring(
  enforcement: Partial<SandboxEnforcementDeclaration>,
  extra: Partial<RecordingProviderConfig> = {},
  volumes?: SandboxBackendVolumes,
) {
  const definition = recordingDefinition(enforcement)
  const backend = Object.assign(new RecordingBackend(definition), volumes ? { volumes } : {})
  const prepared = prepareProviderConfig<RecordingConfig>({ backend: { tier: 'test' }, ...extra }, [
    definition,
  ])
  return composeProvider({ ...prepared, loadBackend: async () => backend })
}

const VOLUME_LAYOUT = { outputs: { source: { type: 'volume', name: 'work' } } } as const

describe('provider.volumes and the volume mount source', () => {
  it('declared false: every member is refused naming volumes and the backend', async () => {
    const provider = providerDeclaring({ volumes: false })
    for (const call of [
      () => provider.volumes.create({ name: 'work', sizeMb: 8 }),
      () => provider.volumes.list(),
      () => provider.volumes.remove('work'),
    ]) {
      const refused = await call().catch((error: unknown) => error)
      expect(SandboxControlRefusedError.isInstance(refused)).toBe(true)
      expect(refused).toMatchObject({ control: 'volumes', backend: 'test:recording' })
    }
    await provider.close()
  })

  it('declared false: a layout mounting a volume is refused when the provider is made', () => {
    expect(() =>
      providerDeclaring({ volumes: false }, { layout: VOLUME_LAYOUT } as never),
    ).toThrowError(
      expect.objectContaining({ control: 'volumes', backend: 'test:recording' }) as Error,
    )
  })

  it('a warm pool of more than one sandbox cannot share a read-write volume: refused when the provider is made', async () => {
    const made = (() => {
      try {
        return providerDeclaring({ volumes: true }, {
          layout: VOLUME_LAYOUT,
          pool: { size: 2 },
        } as never)
      } catch (error) {
        return error
      }
    })()
    expect(SandboxConfigValidationError.isInstance(made)).toBe(true)
    expect((made as SandboxConfigValidationError).issues).toEqual([
      expect.objectContaining({ path: 'pool.size', message: expect.stringContaining('"work"') }),
    ])
    // One pooled sandbox may hold it; many may mount it read-only.
    for (const extra of [
      { layout: VOLUME_LAYOUT, pool: { size: 1 } },
      {
        layout: {
          outputs: { source: { type: 'ephemeral' } },
          uploads: { source: { type: 'volume', name: 'work' } },
        },
        pool: { size: 3 },
      },
    ]) {
      const provider = providerDeclaring({ volumes: true }, extra as never)
      await provider.close()
    }
  })

  it('declared true: names and sizes are checked before the backend is asked', async () => {
    const asked: string[] = []
    const info: SandboxVolumeInfo = {
      name: 'work',
      sizeMb: 8,
      createdAt: 1,
      lastUsedAt: 1,
      usedBy: [],
    }
    const provider = providerDeclaring(
      { volumes: true },
      {},
      {
        create: async (options) => {
          asked.push(`create ${options.name} ${options.sizeMb}`)
          return info
        },
        list: async () => [info],
        remove: async (name) => {
          asked.push(`remove ${name}`)
        },
      },
    )
    for (const bad of [
      { name: '..', sizeMb: 8 },
      { name: 'x/y', sizeMb: 8 },
      { name: 'a'.repeat(65), sizeMb: 8 },
      { name: 'ok', sizeMb: -1 },
      { name: 'ok', sizeMb: 8, extra: true },
    ]) {
      const refused = await provider.volumes.create(bad as never).catch((error: unknown) => error)
      expect(SandboxConfigValidationError.isInstance(refused), JSON.stringify(bad)).toBe(true)
    }
    const badRemove = await provider.volumes.remove('').catch((error: unknown) => error)
    expect(SandboxConfigValidationError.isInstance(badRemove)).toBe(true)
    expect(asked).toEqual([])
    expect(await provider.volumes.create({ name: 'work', sizeMb: 8 })).toEqual(info)
    expect(await provider.volumes.list()).toEqual([info])
    await provider.volumes.remove('work')
    expect(asked).toEqual(['create work 8', 'remove work'])
    await provider.close()
  })

  it('declared true, but the backend has no volumes: refused, not ignored', async () => {
    const provider = providerDeclaring({ volumes: true })
    const refused = await provider.volumes.list().catch((error: unknown) => error)
    expect(refused).toMatchObject({ control: 'volumes' })
    await provider.close()
  })

  it('a layout names a volume by a valid name, once', () => {
    expect(resolveLayout(VOLUME_LAYOUT).outputs.source).toEqual({ type: 'volume', name: 'work' })
    expect(() =>
      resolveLayout({ outputs: { source: { type: 'volume', name: '../x' } } }),
    ).toThrowError(ContainerSandboxLayoutValidationError)
    expect(() =>
      resolveLayout({
        outputs: { source: { type: 'volume', name: 'work' } },
        uploads: { source: { type: 'volume', name: 'work' } },
      }),
    ).toThrowError(/mounted more than once/)
    expect(() =>
      resolveLayout({ outputs: { source: { type: 'volume', name: 'work', sizeMb: 5 } as never } }),
    ).toThrowError(ContainerSandboxLayoutValidationError)
  })
})
