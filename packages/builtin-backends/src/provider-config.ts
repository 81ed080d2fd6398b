import type { ContainerSandboxLayout, SandboxProviderConfigBase } from '@cordon/core'
import type { ACIStandbyPoolBackendConfig } from './aci-config.js'
import type { ContainerBackendConfig } from './docker-config.js'
import type { MicroVMBackendConfig } from './microvm-config.js'

/** The tiers of cordon's built-in backends (the reference's). */
export type SandboxTier = 'container' | 'microvm'

/** The configs of cordon's built-in backends (the reference's union). */
export type SandboxBackendConfig =
  | ContainerBackendConfig
  | ACIStandbyPoolBackendConfig
  | MicroVMBackendConfig

/** The built-in backends by `tier:runtime` name. */
export type SandboxBackendName =
  | 'container:docker'
  | 'container:runsc'
  | 'container:aci-standby-pool'
  | 'microvm:self-hosted'

/**
 * A provider config for a built-in backend, in the reference's shape: the
 * container tier takes a layout, the microVM tier none.
 */
export type SandboxProviderConfig =
  | (SandboxProviderConfigBase & {
      readonly backend: ContainerBackendConfig | ACIStandbyPoolBackendConfig
      readonly layout: ContainerSandboxLayout
    })
  | (SandboxProviderConfigBase & {
      readonly backend: MicroVMBackendConfig
      readonly layout?: undefined
    })
