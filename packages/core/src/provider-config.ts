import {
  aciStandbyPoolBackendConfigSchema,
  containerBackendConfigSchema,
  containerProviderConfigSchema,
  microVMBackendConfigSchema,
  microVMProviderConfigSchema,
  parseConfig,
  type SandboxBackendConfig,
  type SandboxProviderConfig,
} from './config.js'
import { SandboxBackendNotImplementedError, SandboxConfigValidationError } from './errors.js'
import { type ResolvedContainerSandboxLayout, resolveLayout } from './layout.js'

/** The backends cordon knows, by `tier:runtime` name. */
export type SandboxBackendName =
  | 'container:docker'
  | 'container:runsc'
  | 'container:aci-standby-pool'
  | 'microvm:self-hosted'

export interface PreparedProviderConfig {
  readonly backendName: SandboxBackendName
  readonly config: SandboxProviderConfig
  readonly layout: ResolvedContainerSandboxLayout | undefined
}

/**
 * Validates a provider config synchronously and without I/O: picks the backend
 * from `tier` and `runtime`/`service` (an unknown one, which only untyped
 * JavaScript can produce, raises {@link SandboxBackendNotImplementedError}),
 * checks every field with that backend's schema, and resolves the layout. All
 * problems are reported together.
 */
export function prepareProviderConfig(input: SandboxProviderConfig): PreparedProviderConfig {
  if (typeof input !== 'object' || input === null) {
    throw new SandboxConfigValidationError('sandbox provider config', [
      { path: '', message: 'expected an object' },
    ])
  }
  const backendName = backendNameOf((input as { backend?: unknown }).backend)
  const schema =
    backendName === 'microvm:self-hosted'
      ? microVMProviderConfigSchema
      : containerProviderConfigSchema
  const config = parseConfig(schema, input, 'sandbox provider config') as SandboxProviderConfig
  const layout = config.layout ? resolveLayout(config.layout) : undefined
  return { backendName, config, layout }
}

/** Validates just a backend config (for backends used without a provider). */
export function parseBackendConfig(input: SandboxBackendConfig): SandboxBackendConfig {
  const name = backendNameOf(input)
  const schema =
    name === 'microvm:self-hosted'
      ? microVMBackendConfigSchema
      : name === 'container:aci-standby-pool'
        ? aciStandbyPoolBackendConfigSchema
        : containerBackendConfigSchema
  return parseConfig(schema, input, `${name} backend config`) as SandboxBackendConfig
}

/** `tier:runtime` of a backend config, e.g. `container:runsc`. */
export function backendNameOf(backend: unknown): SandboxBackendName {
  if (typeof backend !== 'object' || backend === null) {
    throw new SandboxConfigValidationError('sandbox provider config', [
      { path: 'backend', message: 'expected a backend config object with a "tier"' },
    ])
  }
  const { tier, runtime, service } = backend as {
    tier?: unknown
    runtime?: unknown
    service?: unknown
  }
  if (tier === 'container') {
    if (runtime === undefined || runtime === 'docker') return 'container:docker'
    if (runtime === 'runsc') return 'container:runsc'
    if (runtime === 'aci-standby-pool') return 'container:aci-standby-pool'
    throw new SandboxBackendNotImplementedError(
      `container:${String(runtime)}`,
      'known runtimes are docker, runsc and aci-standby-pool',
    )
  }
  if (tier === 'microvm') {
    if (service === 'self-hosted') return 'microvm:self-hosted'
    throw new SandboxBackendNotImplementedError(
      `microvm:${String(service)}`,
      'the microvm tier supports service "self-hosted"',
    )
  }
  throw new SandboxBackendNotImplementedError(
    String(tier),
    'known tiers are "container" and "microvm"',
  )
}
