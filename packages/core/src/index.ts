/**
 * `@cordon/core`: the contract hosts program against. Types, errors, config
 * schemas and constants; nothing here starts anything. Backend authors import
 * the runtime they build on from `@cordon/core/backend`.
 *
 * The list is explicit on purpose (a test pins it): what is exported here is
 * public API.
 */
export type { AgentHealthReport } from './agent-secret.js'
export type {
  CordonSandboxBackend,
  SandboxBackend,
  SandboxBackendOptions,
} from './backend.js'
export type { SandboxBackendConfigBase, SandboxBackendDefinition } from './backend-definition.js'
export {
  type BrokeredCredential,
  brokeredCredentialSchema,
  type SandboxConnectOptions,
  type SandboxCreateConfig,
  type SandboxProviderConfigBase,
  type SandboxProviderConfigFor,
  sandboxCreateConfigSchema,
  type TlsClientMaterial,
} from './config.js'
export {
  SANDBOX_DEFAULT_MAX_PROCESSES,
  SANDBOX_DEFAULT_MAX_READ_BYTES,
  SANDBOX_DEFAULT_MEMORY_LIMIT_MB,
  SANDBOX_DEFAULT_TIMEOUT_MS,
  SANDBOX_FORK_MAX,
  SANDBOX_MAX_OUTPUT_BYTES,
} from './constants.js'
export type { SandboxListing } from './detached-sandbox.js'
export { type EgressPolicy, type EgressPolicyKind, egressPolicySchema } from './egress-policy.js'
export type {
  MeasuredUsageField,
  SandboxBackendEnforcement,
  SandboxEnforcedLimits,
  SandboxEnforcedMount,
  SandboxEnforcementDeclaration,
  SandboxEnforcementReport,
} from './enforcement.js'
export {
  ContainerSandboxLayoutValidationError,
  SandboxAbortedError,
  SandboxBackendNotImplementedError,
  SandboxBackendNotInstalledError,
  SandboxBackendUnavailableError,
  type SandboxConfigIssue,
  SandboxConfigValidationError,
  SandboxControlRefusedError,
  SandboxCreateTimeoutError,
  SandboxCredentialRefusedError,
  SandboxDestroyedError,
  SandboxError,
  type SandboxErrorCode,
  type SandboxErrorOptions,
  SandboxFileNotFoundError,
  SandboxFileTooLargeError,
  SandboxHostFileError,
  SandboxImagePullError,
  SandboxNotFoundError,
  SandboxOperationError,
  SandboxPathError,
  SandboxPausedError,
  SandboxReadinessError,
  SandboxSnapshotNotFoundError,
  SandboxTransportError,
  SandboxVolumeError,
  type SandboxVolumeErrorReason,
} from './errors.js'
export type {
  EgressReasonCode,
  SandboxEgressEvent,
  SandboxEvent,
  SandboxEventListener,
  SandboxExecEvent,
  SandboxExecOutcome,
  SandboxFileEvent,
  SandboxImagePullProgress,
  SandboxLifecycleEvent,
  SandboxLifecyclePhase,
} from './events.js'
export { isHostAllowed } from './host-allowlist.js'
export {
  type ContainerSandboxLayout,
  type ContainerSandboxLayoutMount,
  type ContainerSandboxMountSource,
  type ContainerSandboxSkillMount,
  containerSandboxLayoutSchema,
  type ResolvedContainerSandboxLayout,
  type ResolvedContainerSandboxMount,
  resolveLayout,
  SANDBOX_DEFAULT_OUTPUTS_PATH,
  SANDBOX_DEFAULT_SCRATCH_PATH,
  SANDBOX_DEFAULT_SKILLS_PARENT,
  SANDBOX_DEFAULT_TOOL_RESULTS_PATH,
  SANDBOX_DEFAULT_TRANSCRIPTS_PATH,
  SANDBOX_DEFAULT_UPLOADS_PATH,
  SKILL_ID_PATTERN,
} from './layout.js'
export type {
  CordonSandboxProvider,
  SandboxProvider,
  SandboxSnapshots,
} from './provider.js'
export type {
  CordonBackendSandbox,
  CordonProcess,
  CordonSandbox,
  Sandbox,
  SandboxAttachOptions,
  SandboxBackendSnapshotOptions,
  SandboxBackendUsage,
  SandboxBatchWriteReport,
  SandboxByteSource,
  SandboxContentWrite,
  SandboxDestroyOptions,
  SandboxDirectoryWatch,
  SandboxEndReason,
  SandboxEnvironment,
  SandboxExecOptions,
  SandboxExecResult,
  SandboxFileChange,
  SandboxFileContent,
  SandboxFileEntry,
  SandboxFileInfo,
  SandboxFileOptions,
  SandboxFileType,
  SandboxFileWrite,
  SandboxForkOptions,
  SandboxForward,
  SandboxForwardOptions,
  SandboxForwardPort,
  SandboxHostFileWrite,
  SandboxMakeDirectoryOptions,
  SandboxNetworkPolicy,
  SandboxOutputBytes,
  SandboxOutputChunk,
  SandboxPauseOptions,
  SandboxPortForward,
  SandboxPortForwardOptions,
  SandboxProcess,
  SandboxProcessInfo,
  SandboxReadFileOptions,
  SandboxRemoveOptions,
  SandboxSnapshot,
  SandboxSnapshotListOptions,
  SandboxSnapshotOptions,
  SandboxSnapshotStore,
  SandboxStartOptions,
  SandboxStatOptions,
  SandboxStatus,
  SandboxTerminal,
  SandboxTerminalOptions,
  SandboxUnixSocketForward,
  SandboxUnixSocketForwardOptions,
  SandboxUsage,
  SandboxWatchOptions,
  SandboxWriteFileOptions,
} from './sandbox.js'
export { isSandboxId, isSnapshotId, type SandboxId } from './sandbox-id.js'
export { type SerializedSandboxError, serializeSandboxError } from './serialize-error.js'
export { escapeTerminalControls } from './terminal-text.js'
export {
  type SandboxVolumeCreateOptions,
  type SandboxVolumeInfo,
  type SandboxVolumes,
  type SandboxVolumeUser,
  VOLUME_MAX_SIZE_MB,
  VOLUME_NAME_PATTERN,
} from './volumes.js'
