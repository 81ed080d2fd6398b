import type {
  ContainerBackendConfig,
  CordonSandboxProvider,
  SandboxProviderConfig,
} from '@cordon/core'
import {
  type CordonSandboxBackend,
  composeProvider,
  parseBackendConfig,
  prepareProviderConfig,
  type SandboxBackendContext,
} from '@cordon/core/backend'
import { DockerBackend } from './docker-backend.js'

export type { ContainerBackendConfig as DockerBackendConfig } from '@cordon/core'
export {
  SandboxBackendUnavailableError,
  SandboxControlRefusedError,
  SandboxCreateTimeoutError,
  SandboxDestroyedError,
  SandboxFileNotFoundError,
  SandboxPathError,
  SandboxReadinessError,
} from '@cordon/core'
export { LABEL as CORDON_LABELS } from '@cordon/core/backend'
export { connectEngine } from './engine-connection.js'
export { collectGarbage, type GarbageReport } from './garbage-collect.js'

/** The backend factory the umbrella (`@cordon/sandbox`) loads for `tier: 'container'`. */
export function createBackend(
  config: ContainerBackendConfig,
  context: SandboxBackendContext,
): CordonSandboxBackend {
  return new DockerBackend(parseBackendConfig(config), context)
}

/**
 * A provider on the Docker backend without the umbrella package, for hosts
 * that depend on `@cordon/backend-docker` alone.
 */
export function createDockerSandboxProvider(
  config: SandboxProviderConfig & { backend: ContainerBackendConfig },
): CordonSandboxProvider {
  const prepared = prepareProviderConfig(config)
  return composeProvider({
    config: prepared.config,
    backendName: prepared.backendName,
    layout: prepared.layout,
    loadBackend: async (context) => createBackend(config.backend, context),
  })
}
