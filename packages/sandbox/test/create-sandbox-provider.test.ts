import { describe, expect, it } from 'vitest'
import {
  BACKEND_PACKAGES,
  createSandboxProvider,
  SandboxBackendNotImplementedError,
  SandboxBackendNotInstalledError,
  SandboxBackendUnavailableError,
  SandboxConfigValidationError,
  type SandboxProviderConfig,
} from '../src/index.js'
import { loadBackendModule } from '../src/load-backend.js'

const layout = { outputs: { source: { type: 'ephemeral' as const } } }

describe('createSandboxProvider', () => {
  it('validates synchronously and reports every problem before any I/O', () => {
    let imported = 0
    const create = () =>
      createSandboxProvider(
        {
          backend: { tier: 'container', image: '' },
          layout: { outputs: { source: { type: 'hostDir', hostPath: 'rel' } } },
          defaultMaxProcesses: 0,
        },
        {
          importBackend: async () => {
            imported++
            return {}
          },
        },
      )
    expect(create).toThrow(SandboxConfigValidationError)
    expect(imported).toBe(0)
  })

  it('raises not-implemented for tiers that do not exist, from untyped JavaScript', () => {
    for (const backend of [
      { tier: 'process' },
      { tier: 'passthrough' },
      { tier: 'container', runtime: 'gvisor' },
      { tier: 'microvm', service: 'fly-machines' },
    ]) {
      expect(() =>
        createSandboxProvider({ backend, layout } as unknown as SandboxProviderConfig),
      ).toThrow(SandboxBackendNotImplementedError)
    }
  })

  it('does no I/O at construction and loads the backend lazily on create', async () => {
    const imports: string[] = []
    const provider = createSandboxProvider(
      { backend: { tier: 'container', runtime: 'runsc', image: 'busybox' }, layout },
      {
        importBackend: async (name) => {
          imports.push(name)
          const error = Object.assign(new Error(`Cannot find package '${name}' imported from x`), {
            code: 'ERR_MODULE_NOT_FOUND',
          })
          throw error
        },
      },
    )
    expect(imports).toEqual([])
    expect(provider.name).toBe('@cordon/sandbox: container:runsc')
    expect(provider.backend).toBe('container:runsc')
    const error = await provider.create().catch((caught: unknown) => caught)
    expect(imports).toEqual(['@cordon/backend-docker'])
    expect(SandboxBackendNotInstalledError.isInstance(error)).toBe(true)
    expect((error as SandboxBackendNotInstalledError).packageName).toBe('@cordon/backend-docker')
    expect((error as Error).message).toContain('npm install @cordon/backend-docker')
  })

  it('maps every backend to its package', () => {
    expect(BACKEND_PACKAGES).toEqual({
      'container:docker': '@cordon/backend-docker',
      'container:runsc': '@cordon/backend-docker',
      'container:aci-standby-pool': '@cordon/backend-aci',
      'microvm:self-hosted': '@cordon/backend-microvm',
    })
  })
})

describe('loadBackendModule', () => {
  it('names the package when it is really not installed', async () => {
    const error = await loadBackendModule(
      'test:missing',
      '@cordon/backend-that-does-not-exist',
    ).catch((caught: unknown) => caught)
    expect(SandboxBackendNotInstalledError.isInstance(error)).toBe(true)
    expect((error as SandboxBackendNotInstalledError).packageName).toBe(
      '@cordon/backend-that-does-not-exist',
    )
  })

  it('reports a package without createBackend as unavailable', async () => {
    const error = await loadBackendModule('test:odd', 'odd', async () => ({
      somethingElse: 1,
    })).catch((caught: unknown) => caught)
    expect(SandboxBackendUnavailableError.isInstance(error)).toBe(true)
    expect(SandboxBackendNotInstalledError.isInstance(error)).toBe(false)
  })

  it('keeps a load failure that is not a missing package as its cause', async () => {
    const boom = new SyntaxError('broken build')
    const error = await loadBackendModule('test:broken', 'broken', async () => {
      throw boom
    }).catch((caught: unknown) => caught)
    expect(SandboxBackendUnavailableError.isInstance(error)).toBe(true)
    expect((error as Error).cause).toBe(boom)
  })
})
