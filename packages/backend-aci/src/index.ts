/**
 * `@cordon/backend-aci`: the `container` tier claimed from an Azure Container
 * Instances standby pool over the ARM REST API, with commands and files going
 * to the cordon agent in each claimed group.
 */
import { fileURLToPath } from 'node:url'
import type { ACIStandbyPoolBackendConfig } from '@cordon/builtin-backends'
import type { CordonSandboxProvider, SandboxProviderConfigFor } from '@cordon/core'
import { standaloneProvider } from '@cordon/core/backend'
import { createBackend } from './aci-backend.js'
import { aciStandbyPoolBackend } from './definition.js'

export type { ACIStandbyPoolBackendConfig } from '@cordon/builtin-backends'
export {
  createAciStandbyPoolBackend,
  createBackend,
  removeEndedDetachedAciGroups,
} from './aci-backend.js'
export {
  BACKEND_NAME,
  DEFAULT_AGENT_PORT,
  DEFAULT_ARM_API_VERSION,
  DEFAULT_ARM_ENDPOINT,
  DEFAULT_NAME_PREFIX,
  DEFAULT_READINESS_TIMEOUT_MS,
  LIFETIME_CONFIG_MAP_KEY,
  NETWORK_API_VERSION,
  SECRET_CONFIG_MAP_KEY,
  STANDBY_POOL_API_VERSION,
} from './aci-defaults.js'
export { ArmAuthorizationError, ArmConflictError, ArmRequestFailure } from './arm-errors.js'
export { aciStandbyPoolBackend } from './definition.js'

/**
 * Absolute path of `cordon-aci-entrypoint.sh`, the command the container
 * group profile runs: copy it into the sandbox image next to the agent.
 */
export function aciEntrypointPath(): string {
  return fileURLToPath(new URL('../cordon-aci-entrypoint.sh', import.meta.url))
}

/**
 * A provider on the ACI standby-pool backend without the umbrella package,
 * for hosts that depend on `@cordon/backend-aci` alone.
 */
export function createAciSandboxProvider(
  config: SandboxProviderConfigFor<ACIStandbyPoolBackendConfig>,
): CordonSandboxProvider {
  return standaloneProvider(config, [aciStandbyPoolBackend], createBackend)
}
