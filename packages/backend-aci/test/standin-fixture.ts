import type { ArmStandinOptions } from '@cordon/arm-standin'
import type {
  ACIStandbyPoolBackendConfig,
  CordonSandboxProvider,
  SandboxProviderConfig,
} from '@cordon/core'
import type { SandboxBackendContext } from '@cordon/core/backend'
import {
  composeTestProvider,
  OUTPUTS_IN_IMAGE,
  startTestArmStandin,
  type TestArmStandin,
} from '@cordon/test-support'
import { aciEntrypointPath, createBackend } from '../src/index.js'

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

/** A provider whose defaults are the stand-in profile's limits, as an operator would set them. */
export function testProvider(
  standin: TestArmStandin,
  options: {
    backend?: Partial<ACIStandbyPoolBackendConfig>
    provider?: Partial<Omit<SandboxProviderConfig, 'backend'>>
    onContext?: (context: SandboxBackendContext) => void
  } = {},
): CordonSandboxProvider {
  return composeTestProvider(
    {
      layout: OUTPUTS_IN_IMAGE,
      defaultMemoryLimitMb: standin.profile.memoryMb,
      defaultMaxProcesses: standin.profile.maxProcesses,
      ...options.provider,
      backend: backendConfig(standin, options.backend),
    } as SandboxProviderConfig,
    createBackend,
    options.onContext,
  )
}
