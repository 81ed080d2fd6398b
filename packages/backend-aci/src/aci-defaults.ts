/** `tier:runtime` of this backend, as errors and events name it. */
export const BACKEND_NAME = 'container:aci-standby-pool'

export const DEFAULT_ARM_ENDPOINT = 'https://management.azure.com'
/**
 * api-version for `Microsoft.ContainerInstance` (container groups and
 * profiles). Claiming from a standby pool needs a version that knows
 * `containerGroupProfile`, `standbyPoolProfile` and `configMap`.
 */
export const DEFAULT_ARM_API_VERSION = '2025-09-01'
/** api-version for the standby pool's runtime view (`Microsoft.StandbyPool`). */
export const STANDBY_POOL_API_VERSION = '2025-10-01'
/**
 * api-version for `Microsoft.Network`, to read the pool's subnet and its
 * network security group.
 */
export const NETWORK_API_VERSION = '2024-05-01'
/** Budget of `create()`: claim, address, and the agent answering. */
export const DEFAULT_READINESS_TIMEOUT_MS = 60_000
/** TCP port the agent listens on in the container (the profile must expose it). */
export const DEFAULT_AGENT_PORT = 2024
export const DEFAULT_NAME_PREFIX = 'cordon'
/** The config-map key a claim delivers the agent secret under. */
export const SECRET_CONFIG_MAP_KEY = 'cordon-agent-secret'
/**
 * The config-map key a detached sandbox's claim delivers its lifetime under
 * (ms); `cordon-aci-entrypoint.sh` hands it to the agent, which ends itself then.
 */
export const LIFETIME_CONFIG_MAP_KEY = 'cordon-agent-lifetime-ms'
