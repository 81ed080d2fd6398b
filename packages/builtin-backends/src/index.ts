/**
 * `@cordon/builtin-backends`: the definitions of cordon's built-in backends
 * (names, config types and schemas, what each enforces) without their code,
 * so `@cordon/sandbox` validates a config synchronously whichever backend
 * package is installed, and each backend package builds on the same
 * definition. The list is explicit; a test pins it.
 */
export {
  type ACIStandbyPoolBackendConfig,
  aciStandbyPoolBackendConfigSchema,
} from './aci-config.js'
export {
  type BackendPackageImporter,
  BUILTIN_BACKEND_PACKAGES,
  builtinBackends,
} from './definitions.js'
export {
  type ContainerBackendConfig,
  containerBackendConfigSchema,
  type RegistryCredential,
} from './docker-config.js'
export {
  imageReferenceProblem,
  imageRegistry,
  registryHostKey,
} from './image-reference-syntax.js'
export {
  type AgentSnapshotRef,
  agentSnapshotRefSchema,
  type MicroVMBackendConfig,
  microVMBackendConfigSchema,
} from './microvm-config.js'
export type {
  FirecrackerBackendInternalConfig,
  OrchestratorTokenProvider,
  SandboxAgentHandle,
  VsockExecuteRequest,
  VsockTransportOptions,
} from './microvm-transport-types.js'
export type {
  SandboxBackendConfig,
  SandboxBackendName,
  SandboxProviderConfig,
  SandboxTier,
} from './provider-config.js'
