import type {
  CordonSandbox,
  CordonSandboxProvider,
  SandboxCreateConfig,
  SandboxEnforcementDeclaration,
} from '@cordon/core'
import { afterAll, beforeAll } from 'vitest'
import type { SandboxConformanceOptions } from './suite-options.js'

/**
 * One provider per describe block, one shared sandbox for the cases that do not
 * change it, and helpers that destroy every extra sandbox a case makes.
 */
export function useSandboxes(options: SandboxConformanceOptions) {
  let provider: CordonSandboxProvider | undefined
  let shared: CordonSandbox | undefined
  beforeAll(async () => {
    provider = options.createProvider()
    shared = await provider.create()
  }, options.timeoutMs ?? 60_000)
  afterAll(async () => {
    await provider?.close()
  }, options.timeoutMs ?? 60_000)
  return {
    get provider(): CordonSandboxProvider {
      if (!provider) throw new Error('provider not created yet')
      return provider
    },
    /**
     * What the backend declares it enforces. It is read when a case runs
     * (a provider is made only then, in `beforeAll`): a case about a
     * control branches on it, proving the control where it is declared and
     * checking its refusal where it is not, and never skips.
     */
    get declared(): SandboxEnforcementDeclaration {
      return this.provider.enforcement
    },
    get sandbox(): CordonSandbox {
      if (!shared) throw new Error('sandbox not created yet')
      return shared
    },
    /** Creates a fresh sandbox, passes it to `use`, and always destroys it. */
    async withFresh<T>(
      config: SandboxCreateConfig,
      use: (sandbox: CordonSandbox) => Promise<T>,
    ): Promise<T> {
      if (!provider) throw new Error('provider not created yet')
      const sandbox = await provider.create(config)
      try {
        return await use(sandbox)
      } finally {
        await sandbox.destroy()
      }
    },
  }
}

export type SandboxesUnderTest = ReturnType<typeof useSandboxes>
