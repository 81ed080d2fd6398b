export type {
  BrokeredCredential,
  EgressPolicy,
  EgressReasonCode,
  SandboxEgressEvent,
} from '@cordon/core'
export { isHostAllowed } from '@cordon/core'
export {
  type AddressClass,
  classifyAddress,
  reasonForAddressClass,
} from './address-screen.js'
export { splitAuthority } from './authority.js'
export type { EgressDecisionEvent, EgressDecisionListener } from './decision-event.js'
export { EGRESS_DENIED_HEADER } from './denial.js'
export {
  type EgressListenOptions,
  EgressProxy,
  type RunningEgressProxy,
} from './egress-proxy.js'
export {
  GATEWAY_SETTINGS_ENV,
  type GatewayAck,
  type GatewayCommand,
  type GatewaySettings,
  gatewayCommandSchema,
} from './gateway-commands.js'
export { type IpLiteral, parseIpLiteral } from './ip-literal.js'
export type { EgressProxyLimits, EgressProxyOptions } from './options.js'
export type { UpstreamTlsOptions } from './pinned-dial.js'
export { type ClientPolicy, UNKNOWN_CLIENT_REASON } from './policy-state.js'
export type { Endpoint } from './proxy-self.js'
export type { EgressLookup, LookupAnswer } from './resolve-and-screen.js'
