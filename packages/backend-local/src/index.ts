/**
 * `@cordon/backend-local`: the `process` tier. cordon's agent as a local
 * child process in a temporary workspace, with no isolation: for trusted
 * development and for hosts' own tests on machines without Docker.
 */

import type { CordonSandboxProvider, SandboxProviderConfigFor } from '@cordon/core'
import { standaloneProvider } from '@cordon/core/backend'
import { localBackend } from './definition.js'
import { createBackend } from './local-backend.js'
import type { LocalBackendConfig } from './local-config.js'

export { BACKEND_NAME, localBackend } from './definition.js'
export {
  createBackend,
  createLocalBackend,
  DEFAULT_READY_TIMEOUT_MS,
  SANDBOX_ID_VARIABLE,
} from './local-backend.js'
export { type LocalBackendConfig, localBackendConfigSchema } from './local-config.js'

/**
 * A provider on the local backend without the umbrella package, for hosts
 * that depend on `@cordon/backend-local` alone. Its egress must be named
 * `allow-all` (`defaultEgress: { kind: 'allow-all' }`): a local process
 * reaches the network as its host does, so the default `deny-all` is refused.
 */
export function createLocalSandboxProvider(
  config: SandboxProviderConfigFor<LocalBackendConfig>,
): CordonSandboxProvider {
  return standaloneProvider(config, [localBackend], createBackend)
}
