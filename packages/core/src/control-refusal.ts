import type { SandboxBackendConfigBase, SandboxBackendDefinition } from './backend-definition.js'
import type { EgressPolicy } from './egress-policy.js'
import { SandboxControlRefusedError } from './errors.js'

/** The controls of one create (or a provider's defaults) that a backend may not enforce. */
export interface RequestedControls {
  readonly memoryLimitMb?: number | undefined
  readonly maxProcesses?: number | undefined
  readonly egress?: EgressPolicy | undefined
  /** The id of the snapshot a sandbox is to start from. */
  readonly snapshot?: string | undefined
}

/**
 * The first control in `request` that the backend `definition` declares it
 * cannot enforce with `config`, as the typed error that names it, or
 * undefined. One rule for the provider (at construction for its defaults,
 * at `create()` for the call's) and for a backend used directly (its
 * `create()` calls it too), so a control is never accepted and ignored.
 * `names` spells the fields as the caller gave them (`defaultMemoryLimitMb`
 * for a provider's default).
 */
export function requestRefusal<Config extends SandboxBackendConfigBase>(
  definition: SandboxBackendDefinition<Config>,
  config: Config,
  request: RequestedControls,
  names: { readonly memoryLimitMb?: string; readonly maxProcesses?: string } = {},
): SandboxControlRefusedError | undefined {
  const { enforcement, name } = definition
  if (request.snapshot !== undefined && !enforcement.snapshot) {
    return new SandboxControlRefusedError(
      'snapshot',
      name,
      'this backend cannot start a sandbox from a snapshot (it takes none)',
    )
  }
  if (request.memoryLimitMb !== undefined && !enforcement.memoryLimit) {
    return new SandboxControlRefusedError(
      names.memoryLimitMb ?? 'memoryLimitMb',
      name,
      'this backend enforces no memory limit; remove the limit or choose a backend that enforces one',
    )
  }
  if (request.maxProcesses !== undefined && !enforcement.processLimit) {
    return new SandboxControlRefusedError(
      names.maxProcesses ?? 'maxProcesses',
      name,
      'this backend enforces no process limit; remove the limit or choose a backend that enforces one',
    )
  }
  if (request.egress) {
    const policy = request.egress
    const control = `egress.${policy.kind}`
    if (!enforcement.egress.includes(policy.kind)) {
      return new SandboxControlRefusedError(
        control,
        name,
        `this backend enforces only ${enforcement.egress.map((kind) => `"${kind}"`).join(', ') || 'no'} egress policies` +
          (enforcement.egress.length > 0
            ? `; name one as the call's egress or the provider's defaultEgress (which is deny-all when unset), e.g. defaultEgress: { kind: '${enforcement.egress[0]}' }`
            : ''),
      )
    }
    const reason = definition.egressRefusal?.(config, policy)
    if (reason !== undefined) return new SandboxControlRefusedError(control, name, reason)
  }
  return undefined
}
