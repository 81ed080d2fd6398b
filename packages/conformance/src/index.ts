export { describeSandboxConformance } from './describe-sandbox-conformance.js'
export {
  RESOLVER_ANSWER_CASES,
  RESOLVER_PROBE_HOSTS,
  type ResolverAnswerCase,
  type ResolverAnswerVerdict,
  type ResolverProbeHost,
} from './resolver-answer-cases.js'
export type { SandboxConformanceOptions } from './suite-options.js'
