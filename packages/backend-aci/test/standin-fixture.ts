import type { ArmStandinOptions } from '@cordon/arm-standin'
import type { ACIStandbyPoolBackendConfig, SandboxProviderConfig } from '@cordon/builtin-backends'
import type { CordonSandboxProvider } from '@cordon/core'
import type { SandboxBackendContext } from '@cordon/core/backend'
import {
  composeTestProvider,
  OUTPUTS_IN_IMAGE,
  startTestArmStandin,
  type TestArmStandin,
} from '@cordon/test-support'
import { aciEntrypointPath, aciStandbyPoolBackend, createBackend } from '../src/index.js'

/** The ARM stand-in for one test file, serving this package's entrypoint; close it with `closeTestArmStandin`. */
export function startTestStandin(
  options: Partial<ArmStandinOptions> = {},
): Promise<TestArmStandin> {
  return startTestArmStandin({ ...options, entrypointPath: aciEntrypointPath() })
}

export function backendConfig(
  standin: TestArmStandin,
  overrides: Partial<ACIStandbyPoolBackendConfig> = {},
): ACIStandbyPoolBackendConfig {
  const token = standin.token
  return {
    ...standin.backendConfig(),
    getArmToken: async () => token,
    readyTimeoutMs: 30_000,
    ...overrides,
  }
}

/** A provider on the stand-in's pool (its limits are the profile's: a claim cannot set any). */
export function testProvider(
  standin: TestArmStandin,
  options: {
    backend?: Partial<ACIStandbyPoolBackendConfig>
    provider?: Partial<Omit<SandboxProviderConfig, 'backend'>>
    onContext?: (context: SandboxBackendContext) => void
  } = {},
): CordonSandboxProvider {
  return composeTestProvider<ACIStandbyPoolBackendConfig>(
    {
      layout: OUTPUTS_IN_IMAGE,
      ...options.provider,
      backend: backendConfig(standin, options.backend),
    },
    [aciStandbyPoolBackend],
    createBackend,
    options.onContext,
  )
}
