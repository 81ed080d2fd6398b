import {
  aciStandbyPoolBackendConfigSchema,
  type ContainerBackendConfig,
  configIssues,
  containerBackendConfigSchema,
  containerProviderFieldsSchemaFor,
  microVMBackendConfigSchema,
  microVMProviderConfigSchema,
  parseConfig,
  type SandboxBackendConfig,
  type SandboxProviderConfig,
} from './config.js'
import { DENY_ALL } from './egress-policy.js'
import { egressRefusal } from './egress-refusal.js'
import {
  ContainerSandboxLayoutValidationError,
  SandboxBackendNotImplementedError,
  type SandboxConfigIssue,
  SandboxConfigValidationError,
  SandboxControlRefusedError,
} from './errors.js'
import { checkLayout, type ResolvedContainerSandboxLayout } from './layout.js'

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
 * checks every field with that backend's schema (an unknown key is an error),
 * resolves the layout, and refuses the reference's fields that cordon cannot
 * honour with {@link SandboxControlRefusedError}. Every validation problem is
 * reported together: in a {@link ContainerSandboxLayoutValidationError} when
 * the layout has one (the class a host of the reference catches), else in a
 * {@link SandboxConfigValidationError}.
 */
export function prepareProviderConfig(input: SandboxProviderConfig): PreparedProviderConfig {
  if (typeof input !== 'object' || input === null) {
    throw new SandboxConfigValidationError('sandbox provider config', [
      { path: '', message: 'expected an object' },
    ])
  }
  const backendName = backendNameOf((input as { backend?: unknown }).backend)
  if (backendName === 'microvm:self-hosted') {
    const config = parseConfig(microVMProviderConfigSchema, input, 'sandbox provider config')
    return { backendName, ...refuseOrKeep(backendName, config), layout: undefined }
  }
  const fields = containerProviderFieldsSchemaFor(
    backendName === 'container:aci-standby-pool' ? 'aci-standby-pool' : 'docker',
  ).safeParse(input)
  const otherIssues: SandboxConfigIssue[] = fields.success ? [] : configIssues(fields.error)
  const layoutInput = (input as { layout?: unknown }).layout
  const checked = layoutInput === undefined ? undefined : checkLayout(layoutInput)
  if (checked && checked.problems.length > 0) {
    throw ContainerSandboxLayoutValidationError.fromIssues(checked.problems, {
      at: 'layout',
      alsoInvalid: otherIssues,
    })
  }
  if (!fields.success || !checked?.layout)
    throw new SandboxConfigValidationError('sandbox provider config', otherIssues)
  const config = { ...fields.data, layout: checked.layout } as SandboxProviderConfig
  return { backendName, ...refuseOrKeep(backendName, config), layout: checked.resolved }
}

/** Refuses what cordon cannot honour in a config that is otherwise valid. */
function refuseOrKeep(
  backendName: SandboxBackendName,
  config: SandboxProviderConfig,
): { config: SandboxProviderConfig } {
  refuseUnhonourableFields(backendName, config.backend)
  const refusal = egressRefusal(backendName, config.backend, config.defaultEgress ?? DENY_ALL)
  if (refusal) throw refusal
  return { config }
}

/** Validates just a backend config (for backends used without a provider). */
export function parseBackendConfig<C extends SandboxBackendConfig>(input: C): C {
  const name = backendNameOf(input)
  const schema =
    name === 'microvm:self-hosted'
      ? microVMBackendConfigSchema
      : name === 'container:aci-standby-pool'
        ? aciStandbyPoolBackendConfigSchema
        : containerBackendConfigSchema
  const config = parseConfig<SandboxBackendConfig>(schema, input, `${name} backend config`)
  refuseUnhonourableFields(name, config)
  return config as C
}

/**
 * The reference's container fields that describe a network path cordon never
 * creates. They are accepted by the types, so a switched host compiles, and
 * refused here, so a host does not believe they took effect.
 */
function refuseUnhonourableFields(name: SandboxBackendName, backend: SandboxBackendConfig): void {
  if (name !== 'container:docker' && name !== 'container:runsc') return
  const config = backend as ContainerBackendConfig
  if (config.hostReachability !== undefined) {
    throw new SandboxControlRefusedError(
      'hostReachability',
      name,
      'cordon reaches every sandbox through the engine API and needs no network path to it; remove hostReachability',
    )
  }
  if (config.network !== undefined && config.network !== 'none') {
    throw new SandboxControlRefusedError(
      'network',
      name,
      `a sandbox never joins a routable network ("${config.network}"): its only way out is the egress gateway. Remove network (or set "none") and choose an egress policy such as { kind: 'allow-all' } or { kind: 'static', allowedHosts }`,
    )
  }
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
    // runc is the Docker backend's default runtime, asked for by name.
    if (runtime === undefined || runtime === 'docker' || runtime === 'runc')
      return 'container:docker'
    if (runtime === 'runsc') return 'container:runsc'
    if (runtime === 'aci-standby-pool') return 'container:aci-standby-pool'
    throw new SandboxBackendNotImplementedError(
      `container:${String(runtime)}`,
      'known runtimes are docker, runc, runsc and aci-standby-pool',
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
