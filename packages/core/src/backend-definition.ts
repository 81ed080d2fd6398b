import type { z } from 'zod'
import type { SandboxBackendFactory } from './backend.js'
import type { EgressPolicy } from './egress-policy.js'
import type { SandboxEnforcementDeclaration } from './enforcement.js'
import { SandboxConfigValidationError } from './errors.js'
import type { ResolvedContainerSandboxLayout } from './layout.js'

/**
 * What every backend config has: `tier` names the kind of boundary
 * (`container`, `microvm`, `process`, ...); the other keys are the backend's
 * own, and its definition decides from them whether a config is its.
 */
export interface SandboxBackendConfigBase {
  readonly tier: string
}

/**
 * A backend, as the provider sees it before its code is loaded: what it is
 * called, which configs are its, how to validate one, what it enforces, and
 * how to load it. A backend package exports one (cordon's own included) and a
 * host hands it to `createSandboxProvider(config, { backends: [definition] })`.
 * Make one with {@link defineBackend}.
 */
export interface SandboxBackendDefinition<
  Config extends SandboxBackendConfigBase = SandboxBackendConfigBase,
> {
  /**
   * `tier:runtime`, e.g. `process:local`: names the backend in errors,
   * events, the provider's id and its `backend` field.
   */
  readonly name: string
  readonly tier: string
  /**
   * Whether a config names this backend. It reads only the keys that pick a
   * backend (`tier`, `runtime`, `service`, ...) and must not throw; the
   * config is validated after the pick, with {@link configSchema}.
   */
  selects(backend: SandboxBackendConfigBase): boolean
  /**
   * Validates a config of this backend: every problem is reported at once,
   * and an unknown key is a problem (make the object schema `.strict()`).
   */
  readonly configSchema: z.ZodType<Config>
  /**
   * Whether the provider config carries a container layout: `required`
   * (the container tier's mounts), `optional`, or `none` (refused when given).
   */
  readonly layout: 'required' | 'optional' | 'none'
  /** What the backend enforces; see {@link SandboxEnforcementDeclaration}. */
  readonly enforcement: SandboxEnforcementDeclaration
  /**
   * Why a valid config still asks for something this backend cannot honour
   * (the control named and the reason), or undefined. Checked when the
   * provider is built, before any I/O.
   */
  configRefusal?(config: Config): { control: string; reason: string } | undefined
  /**
   * Why this backend cannot mount a layout that is otherwise valid (a
   * source kind it does not provide, named by its key and kind), or
   * undefined. Checked when the provider is built, before any I/O; absent,
   * every valid layout is taken.
   */
  layoutRefusal?(
    layout: ResolvedContainerSandboxLayout,
  ): { control: string; reason: string } | undefined
  /**
   * Why this config cannot enforce an egress policy whose kind the backend
   * otherwise enforces (for example, a backend that needs a subnet for
   * `deny-all`), or undefined.
   */
  egressRefusal?(config: Config, policy: EgressPolicy): string | undefined
  /** Loads the backend's factory; the provider calls it once, on first use. */
  load(): Promise<SandboxBackendFactory<Config>>
}

const NAME = /^[a-z0-9][a-z0-9-]*:[a-z0-9][a-z0-9.-]*$/

/**
 * Checks a backend definition's shape and freezes it. A definition whose
 * name is not `tier:runtime` or whose declaration lacks a field is a
 * programming error of the backend's author, reported here rather than at a
 * host's first `create()`.
 */
export function defineBackend<Config extends SandboxBackendConfigBase>(
  definition: SandboxBackendDefinition<Config>,
): SandboxBackendDefinition<Config> {
  const problems: { path: string; message: string }[] = []
  if (!NAME.test(definition.name))
    problems.push({
      path: 'name',
      message: 'expected "tier:runtime" in lowercase, e.g. "process:local"',
    })
  else if (definition.name.split(':')[0] !== definition.tier)
    problems.push({
      path: 'tier',
      message: `must be the part of name before ":" ("${definition.name}")`,
    })
  for (const key of ['selects', 'load'] as const) {
    if (typeof definition[key] !== 'function')
      problems.push({ path: key, message: 'expected a function' })
  }
  if (typeof definition.configSchema?.safeParse !== 'function')
    problems.push({ path: 'configSchema', message: 'expected a zod schema' })
  if (!['required', 'optional', 'none'].includes(definition.layout))
    problems.push({ path: 'layout', message: 'expected "required", "optional" or "none"' })
  const declared = definition.enforcement as unknown as Record<string, unknown> | undefined
  for (const key of [
    'memoryLimit',
    'oomReporting',
    'survivesOutOfMemory',
    'processLimit',
    'denyAllNetwork',
    'terminal',
    'pause',
    'reconnect',
    'externalWatch',
    'snapshot',
    'memorySnapshot',
    'volumes',
  ]) {
    if (typeof declared?.[key] !== 'boolean')
      problems.push({ path: `enforcement.${key}`, message: 'expected true or false' })
  }
  for (const key of ['egress', 'measuredUsage']) {
    if (!Array.isArray(declared?.[key]))
      problems.push({ path: `enforcement.${key}`, message: 'expected a list' })
  }
  for (const key of ['isolation', 'environment']) {
    if (typeof declared?.[key] !== 'string')
      problems.push({ path: `enforcement.${key}`, message: 'expected a string' })
  }
  if (problems.length > 0)
    throw new SandboxConfigValidationError(
      `backend definition "${String(definition.name)}"`,
      problems,
    )
  return Object.freeze({ ...definition, enforcement: Object.freeze({ ...definition.enforcement }) })
}
