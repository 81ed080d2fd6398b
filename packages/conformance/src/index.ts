export {
  ALL_CAPABILITIES,
  type MeasuredUsageField,
  type SandboxConformanceCapabilities,
} from './capabilities.js'
export { describeSandboxConformance } from './describe-sandbox-conformance.js'
export type { SandboxConformanceOptions } from './suite-options.js'
