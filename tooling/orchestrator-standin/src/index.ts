export { parseCreateRequest, type ValidCreateRequest } from './create-request.js'
export { GUEST_OUTPUTS_DIR, guestSandboxUid } from './guest-container.js'
export { type MtlsRelayCredentials, startMtlsRelay } from './mtls-relay.js'
export {
  DEFAULT_GUEST_IMAGE,
  type OrchestratorStandin,
  type OrchestratorStandinOptions,
  removeLabelledContainers,
  startOrchestratorStandin,
} from './standin-server.js'
export { startVsockRelay } from './vsock-relay.js'
