import { z } from 'zod'
import type { SandboxBackendConfigBase, SandboxBackendDefinition } from './backend-definition.js'
import {
  configIssues,
  parseConfig,
  providerBaseShape,
  type SandboxProviderConfigFor,
} from './config.js'
import { requestRefusal } from './control-refusal.js'
import {
  ContainerSandboxLayoutValidationError,
  SandboxBackendNotImplementedError,
  type SandboxConfigIssue,
  SandboxConfigValidationError,
  SandboxControlRefusedError,
} from './errors.js'
import { checkLayout, planLayoutMounts, type ResolvedContainerSandboxLayout } from './layout.js'

export interface PreparedProviderConfig<
  Config extends SandboxBackendConfigBase = SandboxBackendConfigBase,
> {
  readonly definition: SandboxBackendDefinition<Config>
  readonly config: SandboxProviderConfigFor<Config>
  readonly layout: ResolvedContainerSandboxLayout | undefined
}

/**
 * Validates a provider config synchronously and without I/O: picks the one
 * backend among `definitions` whose `selects` takes the config's `backend`
 * (none raises {@link SandboxBackendNotImplementedError} listing the known
 * ones), checks every field with that backend's schema and the provider's
 * own (an unknown key is an error), resolves the layout the backend asks
 * for, and refuses with {@link SandboxControlRefusedError} what the backend
 * declares it cannot enforce (a default limit or egress policy, or a field
 * of its config). Every validation problem is reported together: in a
 * {@link ContainerSandboxLayoutValidationError} when the layout has one (the
 * class a host of the reference catches), else in a
 * {@link SandboxConfigValidationError}.
 */
export function prepareProviderConfig<Config extends SandboxBackendConfigBase>(
  input: SandboxProviderConfigFor<Config>,
  definitions: readonly SandboxBackendDefinition<Config>[],
): PreparedProviderConfig<Config> {
  if (typeof input !== 'object' || input === null) {
    throw new SandboxConfigValidationError('sandbox provider config', [
      { path: '', message: 'expected an object' },
    ])
  }
  const definition = selectBackend((input as { backend?: unknown }).backend, definitions)
  const fields = z
    .object({
      ...providerBaseShape,
      backend: definition.configSchema,
      layout:
        definition.layout === 'none'
          ? z.undefined({ error: `${definition.name} takes no layout` }).optional()
          : definition.layout === 'required'
            ? z.unknown().refine((value) => value !== undefined, `required by ${definition.name}`)
            : z.unknown().optional(),
    })
    .strict()
    .readonly()
    .safeParse(input)
  const otherIssues: SandboxConfigIssue[] = fields.success ? [] : configIssues(fields.error)
  const layoutInput = (input as { layout?: unknown }).layout
  const checked =
    layoutInput === undefined || definition.layout === 'none' ? undefined : checkLayout(layoutInput)
  if (checked && checked.problems.length > 0) {
    throw ContainerSandboxLayoutValidationError.fromIssues(checked.problems, {
      at: 'layout',
      alsoInvalid: otherIssues,
    })
  }
  if (!fields.success)
    throw new SandboxConfigValidationError('sandbox provider config', otherIssues)
  const config = {
    ...fields.data,
    ...(checked?.layout ? { layout: checked.layout } : {}),
  } as SandboxProviderConfigFor<Config>
  checkPooledVolumes(config.pool, checked?.resolved)
  const refusal =
    volumeSourceRefusal(definition, checked?.resolved) ??
    layoutRefusal(definition, checked?.resolved) ??
    configRefusal(definition, config.backend) ??
    requestRefusal(
      definition,
      config.backend,
      {
        memoryLimitMb: config.defaultMemoryLimitMb,
        maxProcesses: config.defaultMaxProcesses,
        egress: config.defaultEgress,
      },
      { memoryLimitMb: 'defaultMemoryLimitMb', maxProcesses: 'defaultMaxProcesses' },
    )
  if (refusal) throw refusal
  return { definition, config, layout: checked?.resolved }
}

/**
 * Validates just a backend config, for a backend used without a provider:
 * every problem at once, then what the backend cannot honour.
 */
export function parseBackendConfig<Config extends SandboxBackendConfigBase>(
  definition: SandboxBackendDefinition<Config>,
  input: Config,
): Config {
  const config = parseConfig(definition.configSchema, input, `${definition.name} backend config`)
  const refusal = configRefusal(definition, config)
  if (refusal) throw refusal
  return config
}

/** A layout that mounts a named volume, on a backend that keeps none. */
function volumeSourceRefusal(
  definition: SandboxBackendDefinition<SandboxBackendConfigBase>,
  layout: ResolvedContainerSandboxLayout | undefined,
): SandboxControlRefusedError | undefined {
  if (!layout || definition.enforcement.volumes) return undefined
  const mount = planLayoutMounts(layout).find((plan) => plan.source.type === 'volume')
  if (!mount) return undefined
  const role = mount.role === 'skill' ? `skills.${mount.skillId}` : mount.role
  return new SandboxControlRefusedError(
    'volumes',
    definition.name,
    `layout.${role}.source is a named volume, and this backend keeps no named volumes; use a backend whose definition declares volumes: true`,
  )
}

/**
 * A warm pool of more than one sandbox cannot share a read-write volume: one
 * sandbox at a time may write it, so every pooled sandbox after the first
 * would fail to start, and the pool would retry it for as long as it lives.
 * Refused when the provider is made, naming both fields.
 */
function checkPooledVolumes(
  pool: { readonly size: number } | undefined,
  layout: ResolvedContainerSandboxLayout | undefined,
): void {
  if (!layout || !pool || pool.size <= 1) return
  const writable = planLayoutMounts(layout).find(
    (plan) => plan.source.type === 'volume' && !plan.readOnly,
  )
  if (writable?.source.type !== 'volume') return
  const role = writable.role === 'skill' ? `skills.${writable.skillId}` : writable.role
  throw new SandboxConfigValidationError('sandbox provider config', [
    {
      path: 'pool.size',
      message: `a pool of ${pool.size} sandboxes would each mount volume ${JSON.stringify(writable.source.name)} read-write (layout.${role}), and only one sandbox at a time may write a volume; use a pool of 1, or mount the volume read-only`,
    },
  ])
}

function layoutRefusal<Config extends SandboxBackendConfigBase>(
  definition: SandboxBackendDefinition<Config>,
  layout: ResolvedContainerSandboxLayout | undefined,
): SandboxControlRefusedError | undefined {
  const refused = layout ? definition.layoutRefusal?.(layout) : undefined
  return refused
    ? new SandboxControlRefusedError(refused.control, definition.name, refused.reason)
    : undefined
}

function configRefusal<Config extends SandboxBackendConfigBase>(
  definition: SandboxBackendDefinition<Config>,
  config: Config,
): SandboxControlRefusedError | undefined {
  const refused = definition.configRefusal?.(config)
  return refused
    ? new SandboxControlRefusedError(refused.control, definition.name, refused.reason)
    : undefined
}

/** The definition among `definitions` that takes `backend`. */
export function selectBackend<Config extends SandboxBackendConfigBase>(
  backend: unknown,
  definitions: readonly SandboxBackendDefinition<Config>[],
): SandboxBackendDefinition<Config> {
  if (
    typeof backend !== 'object' ||
    backend === null ||
    typeof (backend as { tier?: unknown }).tier !== 'string'
  ) {
    throw new SandboxConfigValidationError('sandbox provider config', [
      { path: 'backend', message: 'expected a backend config object with a "tier"' },
    ])
  }
  const chosen = definitions.filter((definition) =>
    definition.selects(backend as SandboxBackendConfigBase),
  )
  const known = definitions.map((definition) => definition.name).join(', ')
  if (chosen.length === 0) {
    throw new SandboxBackendNotImplementedError(
      describeSelector(backend as Record<string, unknown>),
      known ? `the backends given are ${known}` : 'no backend definitions were given',
    )
  }
  if (chosen.length > 1) {
    throw new SandboxConfigValidationError('sandbox provider config', [
      {
        path: 'backend',
        message: `more than one backend takes this config (${chosen.map((d) => d.name).join(', ')}); give each definition a selector of its own`,
      },
    ])
  }
  return chosen[0] as SandboxBackendDefinition<Config>
}

/** `tier:runtime` (or `tier:service`) as a config spells it, for an error. */
function describeSelector(backend: Record<string, unknown>): string {
  const second = backend.runtime ?? backend.service
  return second === undefined ? String(backend.tier) : `${String(backend.tier)}:${String(second)}`
}
