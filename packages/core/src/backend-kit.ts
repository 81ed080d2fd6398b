/**
 * `@cordon/core/backend`: what backend authors build on. The provider
 * runtime (validation, defaults, warm pool, lifetimes, events), deadlines,
 * output collection, layout planning, owner labels, the shared egress
 * rules, the JSON client of a remote control plane and the error markers a
 * backend's own error classes use. Hosts do not need any of it; the list is
 * explicit and pinned by a test.
 */
export { MIN_AGENT_SECRET_LENGTH, requireAgentSecret } from './agent-secret.js'
export {
  type CordonSandboxBackend,
  resolveBackendOptions,
  type SandboxBackendContext,
  type SandboxBackendFactory,
  type SandboxBackendModule,
  type SandboxCreateRequest,
  withEnforcedLimits,
} from './backend.js'
export {
  defineBackend,
  type SandboxBackendConfigBase,
  type SandboxBackendDefinition,
} from './backend-definition.js'
export { type BackgroundSweep, backgroundSweep, removeEach } from './background-sweep.js'
export { boundedMemo } from './bounded-memo.js'
export { cleanupFailureEvent } from './cleanup-failure-event.js'
export {
  type ComposeProviderOptions,
  composeProvider,
  standaloneProvider,
} from './compose-provider.js'
export {
  durationMsSchema,
  functionSchema,
  parseConfig,
  tcpPortSchema,
  tlsClientSchema,
} from './config.js'
export { type RequestedControls, requestRefusal } from './control-refusal.js'
export {
  type CreateSequenceOptions,
  type CreateSequenceSteps,
  runCreateSequence,
} from './create-sequence.js'
export {
  CredentialStore,
  defaultCredentialStore,
  type StoredCredential,
} from './credential-store.js'
export {
  type DeadlineOptions,
  sleep,
  withDeadline,
} from './deadline.js'
export type {
  ConnectedBackendSandbox,
  SandboxBackendConnectRequest,
  SandboxListing,
} from './detached-sandbox.js'
export { DENY_ALL, networkPolicySchema } from './egress-policy.js'
export type { SandboxEnforcementDeclaration } from './enforcement.js'
export {
  hasMarker as hasErrorMarker,
  markerFor as errorMarker,
  throwIfAborted,
} from './errors.js'
export { describeError } from './event-error.js'
export { ExecOutputCollector } from './exec-output.js'
export { type ValidatedExecRequest, validateExecRequest } from './exec-request.js'
export {
  forwardDirectoriesRoot,
  makeForwardDirectory,
  sweepForwardDirectories,
} from './forward-directories.js'
export {
  type AllowlistEntry,
  type CompiledAllowlist,
  compileAllowlist,
  normalizeHostname,
  parseAllowlistEntry,
} from './host-allowlist.js'
export { isTransientStatus, parseRetryAfter, retryDelayMs } from './http-retry.js'
export {
  JsonHttpClient,
  type JsonHttpClientOptions,
  type JsonHttpMethod,
  type JsonHttpResponse,
  type JsonHttpSendOptions,
} from './json-http-client.js'
export {
  type ContainerSandboxMountRole,
  enforcedLayoutMounts,
  type LayoutMountPlan,
  planLayoutMounts,
  readableRoots,
  refusedHostTree,
  writableRoots,
} from './layout.js'
export {
  judgeOwner,
  LABEL,
  type OwnerJudgement,
  type OwnerState,
  ownerLabels,
  type ResourceRole,
  type UnjudgedOwnerReason,
} from './owner-labels.js'
export { type PortForwardListener, validatePortForwardRequest } from './port-forward-request.js'
export {
  type PreparedProviderConfig,
  parseBackendConfig,
  prepareProviderConfig,
  selectBackend,
} from './provider-config.js'
export {
  askResolver,
  DEFAULT_RESOLVER_TIMEOUT_MS,
  type ResolverAnswer,
} from './resolver-answer.js'
export { resolverRefusedEvent } from './resolver-refused-event.js'
export {
  newSandboxId,
  newSnapshotId,
  SANDBOX_ID_PATTERN,
  SNAPSHOT_ID_PATTERN,
} from './sandbox-id.js'
export { resolveSandboxPath } from './sandbox-path.js'
export { timeLimit } from './time-limit.js'
export { type SandboxBackendVolumes, volumesRefusal } from './volumes.js'
