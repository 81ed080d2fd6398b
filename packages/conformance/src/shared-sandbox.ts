import type {
  CordonSandbox,
  CordonSandboxProvider,
  SandboxCreateConfig,
  SandboxEnforcementDeclaration,
} from '@cordon/core'
import { afterAll, beforeAll, type TestContext } from 'vitest'
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
     * (a provider is made only then, in `beforeAll`), so a case that does
     * not apply skips itself with {@link onlyIf}.
     */
    get declared(): SandboxEnforcementDeclaration {
      return this.provider.enforcement
    },
    get sandbox(): CordonSandbox {
      if (!shared) throw new Error('sandbox not created yet')
      return shared
    },
    /**
     * Skips the running case unless `applies` holds of the declaration: a
     * case is skipped only by what the backend declares, and each declared
     * value has a case that runs (the proof or the refusal).
     */
    onlyIf(
      context: TestContext,
      applies: (declared: SandboxEnforcementDeclaration) => boolean,
    ): void {
      if (!applies(this.declared)) context.skip()
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
