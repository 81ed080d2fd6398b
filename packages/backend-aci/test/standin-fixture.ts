import { randomBytes } from 'node:crypto'
import { type ArmStandin, type ArmStandinOptions, startArmStandin } from '@cordon/arm-standin'
import type { ACIStandbyPoolBackendConfig, SandboxProviderConfig } from '@cordon/builtin-backends'
import type { ContainerSandboxLayout, CordonSandboxProvider } from '@cordon/core'
import {
  composeProvider,
  prepareProviderConfig,
  type SandboxBackendContext,
} from '@cordon/core/backend'
import { aciEntrypointPath, aciStandbyPoolBackend, createBackend } from '../src/index.js'
import { TEST_RUN_ID, TEST_RUN_LABEL } from './test-run.js'

export type TestStandin = ArmStandin & { readonly token: string }

/**
 * A stand-in for one test file, its containers labelled with the run. LRO
 * answers carry `Retry-After: 0` unless a test asks otherwise, to keep wall
 * time down; the client still waits its minimum poll interval.
 */
export async function startTestStandin(
  options: Partial<ArmStandinOptions> = {},
): Promise<TestStandin> {
  const token = options.token ?? randomBytes(24).toString('base64url')
  const standin = await startArmStandin({
    retryAfterSeconds: 0,
    ...options,
    token,
    entrypointPath: aciEntrypointPath(),
    labels: { [TEST_RUN_LABEL]: TEST_RUN_ID, ...options.labels },
  })
  await standin.poolSettled()
  return Object.assign(standin, { token })
}

/** Closes the stand-in; a container group still claimed is a sandbox the backend failed to delete. */
export async function closeTestStandin(standin: TestStandin | undefined): Promise<void> {
  if (!standin) return
  const leaked = standin.groups()
  await standin.close()
  if (leaked.length > 0) throw new Error(`container groups were left claimed: ${leaked.join(', ')}`)
}

export function backendConfig(
  standin: TestStandin,
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

export const OUTPUTS_IN_IMAGE: ContainerSandboxLayout = { outputs: { source: { type: 'inImage' } } }

/** A provider on the stand-in's pool (its limits are the profile's: a claim cannot set any). */
export function testProvider(
  standin: TestStandin,
  options: {
    backend?: Partial<ACIStandbyPoolBackendConfig>
    provider?: Partial<Omit<SandboxProviderConfig, 'backend'>>
    onContext?: (context: SandboxBackendContext) => void
  } = {},
): CordonSandboxProvider {
  const prepared = prepareProviderConfig<ACIStandbyPoolBackendConfig>(
    {
      layout: OUTPUTS_IN_IMAGE,
      ...options.provider,
      backend: backendConfig(standin, options.backend),
    },
    [aciStandbyPoolBackend],
  )
  return composeProvider({
    ...prepared,
    loadBackend: async (context) => {
      options.onContext?.(context)
      return createBackend(prepared.config.backend, context)
    },
  })
}
