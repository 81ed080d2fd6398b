/**
 * `@cordon/backend-microvm`: the `microvm` tier. A client of a guest
 * orchestrator's control plane (see openapi.yaml) plus the transport to the
 * cordon agent inside each guest.
 */

import type { MicroVMBackendConfig } from '@cordon/builtin-backends'
import type { CordonSandboxProvider, SandboxProviderConfigFor } from '@cordon/core'
import { standaloneProvider } from '@cordon/core/backend'
import { microVMBackend } from './definition.js'
import { createBackend } from './microvm-backend.js'

/** The sandbox `create()` resolves with: `AgentSandbox` from `@cordon/agent/sandbox`, under its former name. */
export { AgentSandbox as MicroVMSandbox } from '@cordon/agent/sandbox'
export type {
  FirecrackerBackendInternalConfig,
  MicroVMBackendConfig,
  OrchestratorTokenProvider,
  SandboxAgentHandle,
  VsockExecuteRequest,
  VsockTransportOptions,
} from '@cordon/builtin-backends'
export {
  BACKEND_NAME,
  ControlPlaneClient,
  type ControlPlaneClientOptions,
} from './control-plane-client.js'
export type {
  AgentSnapshotReference,
  ControlPlaneErrorBody,
  CreateSandboxRequestBody,
  CreateSandboxResponseBody,
  CreateSnapshotRequestBody,
  SandboxAgentEndpoint,
  SandboxStateBody,
  SnapshotBody,
} from './control-plane-types.js'
export { microVMBackend } from './definition.js'
export { removeEndedDetachedMicroVMGuests } from './detached-sweep.js'
export { encodeEgressAllowlist } from './egress-allowlist.js'
export { removeMicroVMGuestsOfGoneHosts } from './gone-owner-sweep.js'
export {
  createBackend,
  createMicroVMBackend,
  DEFAULT_HOST_GONE_GRACE_MS,
  DEFAULT_READINESS_TIMEOUT_MS,
  type MicroVMBackendOptions,
} from './microvm-backend.js'
export {
  DEFAULT_SNAPSHOT_RETENTION_MS,
  removeExpiredMicroVMSnapshots,
} from './snapshot-store.js'
export {
  type AgentAddress,
  DEFAULT_AGENT_VSOCK_PORT,
  VsockAgentTransport,
  type VsockTransportTuning,
} from './vsock-agent-transport.js'
export { VsockHandshakeError, vsockConnect } from './vsock-handshake.js'

/**
 * A provider on the microVM backend without the umbrella package, for hosts
 * that depend on `@cordon/backend-microvm` alone.
 */
export function createMicroVMSandboxProvider(
  config: SandboxProviderConfigFor<MicroVMBackendConfig>,
): CordonSandboxProvider {
  return standaloneProvider(config, [microVMBackend], createBackend)
}
