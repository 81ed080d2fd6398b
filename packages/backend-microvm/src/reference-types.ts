import type { MicroVMBackendConfig } from '@cordon/core'

/** The reference's name for the closure that mints the control plane's bearer token. */
export type OrchestratorTokenProvider = () => Promise<string>

/**
 * The reference's name for the microVM backend's settings once the tier is
 * chosen: `MicroVMBackendConfig` without `tier` and `service`.
 */
export type FirecrackerBackendInternalConfig = Omit<MicroVMBackendConfig, 'tier' | 'service'>
