export { ArmHttpError } from './arm-http.js'
export {
  type ArmStandin,
  type ArmStandinOptions,
  type RecordedArmRequest,
  type StandinBackendConfig,
  SUPPORTED_API_VERSIONS,
  startArmStandin,
} from './arm-standin.js'
export type { StandinResourceIds } from './container-groups.js'
export type { ArmFault, ArmRequestKind, FaultMatch, FaultPlan } from './fault-plan.js'
export {
  AZURE_DEFAULT_SECURITY_RULES,
  DEFAULT_SUBNET,
  denyOutbound,
  README_SECURITY_RULES,
  type StandinNetwork,
  type StandinSecurityGroupSpec,
  type StandinSecurityRule,
  type StandinSubnetSpec,
} from './standin-network.js'
export {
  DEFAULT_PROFILE,
  SECRET_CONFIG_MAP_KEY,
  type StandinProfileSpec,
} from './standin-profile.js'
