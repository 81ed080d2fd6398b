import { describe, expect, it } from 'vitest'
import { composeProvider, prepareProviderConfig } from '../src/backend-kit.js'
import { SandboxConfigValidationError } from '../src/index.js'
import { RECORDING, RecordingBackend, type RecordingProviderConfig } from './memory-backend.js'

const base = {
  backend: { tier: 'test' },
  layout: { outputs: { source: { type: 'ephemeral' } } },
} as RecordingProviderConfig

function issuePaths(run: () => unknown): string[] {
  try {
    run()
  } catch (error) {
    if (SandboxConfigValidationError.isInstance(error))
      return error.issues.map((issue) => issue.path)
    throw error
  }
  return []
}

describe('memory and process limits have a ceiling the kernel takes', () => {
  it('refuses provider defaults past it, naming each field', () => {
    expect(
      issuePaths(() =>
        prepareProviderConfig({ ...base, defaultMaxProcesses: 1e9, defaultMemoryLimitMb: 1e12 }, [
          RECORDING,
        ]),
      ).sort(),
    ).toEqual(['defaultMaxProcesses', 'defaultMemoryLimitMb'])
  })

  it('refuses a create past it, naming each field, and takes the ceiling itself', async () => {
    const backend = new RecordingBackend()
    const provider = composeProvider({
      ...prepareProviderConfig(base, [RECORDING]),
      loadBackend: async () => backend,
    })
    const refused = await provider
      .create({ maxProcesses: 4_194_305, memoryLimitMb: 1e12 })
      .catch((error: unknown) => error)
    expect(SandboxConfigValidationError.isInstance(refused)).toBe(true)
    expect(
      (refused as SandboxConfigValidationError).issues.map((issue) => issue.path).sort(),
    ).toEqual(['maxProcesses', 'memoryLimitMb'])
    expect(backend.requests).toEqual([])
    const sandbox = await provider.create({
      maxProcesses: 4_194_304,
      memoryLimitMb: 64 * 1024 * 1024,
    })
    await sandbox.destroy()
    await provider.close()
  })
})
