/**
 * `@cordon/test-support`: what cordon's own tests share, written once. Private
 * to this workspace and never published.
 */
export {
  closeTestArmStandin,
  startTestArmStandin,
  type TestArmStandin,
} from './arm-standin.js'
export { endReasonOf } from './end-reason.js'
export {
  assertNoEngineLeftovers,
  type EngineLeftovers,
  engineLeftovers,
  leakCheckedTestRun,
} from './engine-leak-check.js'
export { startTestOrchestrator, type TestOrchestratorStandin } from './orchestrator-standin.js'
export {
  backendCreateRequest,
  composeTestProvider,
  containerTestBackend,
  EPHEMERAL_OUTPUTS,
  OUTPUTS_IN_IMAGE,
  testBackendContext,
} from './requests.js'
export { strangerTsconfig } from './stranger-project.js'
export {
  BUSYBOX_IMAGE,
  NODE_IMAGE,
  startTestRun,
  TEST_RUN_LABEL,
  testRunId,
  testRunLabels,
} from './test-run.js'
export { until } from './until.js'
