import type { SandboxBackendOptions } from './backend.js'
import type { SandboxBackendConfigBase, SandboxBackendDefinition } from './backend-definition.js'
import type { SandboxListing } from './detached-sandbox.js'
import {
  SandboxConfigValidationError,
  SandboxControlRefusedError,
  type SandboxError,
} from './errors.js'
import type { ManagedSandbox } from './managed-sandbox.js'

/**
 * Why a `create({ detached: true })` cannot be made, or undefined: the
 * backend declares no reconnect, or no lifetime bounds the sandbox (a
 * detached sandbox must end by itself, even if no host ever connects).
 */
export function detachedRefusal<Config extends SandboxBackendConfigBase>(
  definition: SandboxBackendDefinition<Config>,
  request: SandboxBackendOptions,
): SandboxError | undefined {
  if (!definition.enforcement.reconnect)
    return new SandboxControlRefusedError(
      'detached',
      definition.name,
      'this backend declares no reconnect: its sandboxes end with the host process that made them',
    )
  if (request.lifetimeMs === undefined)
    return new SandboxConfigValidationError('sandbox create config', [
      {
        path: 'lifetimeMs',
        message:
          "a detached sandbox needs a lifetime (the call's lifetimeMs or the provider's defaultLifetimeMs), so that it ends even if no host connects again",
      },
    ])
  return undefined
}

/** What `provider.list()` shows for a backend that cannot list: this provider's own live sandboxes. */
export function listLiveSandboxes(live: Iterable<ManagedSandbox>): SandboxListing[] {
  return [...live].map((sandbox) => ({
    id: sandbox.id,
    status: sandbox.paused ? 'paused' : 'running',
    labels: {},
    createdAt: sandbox.handedOutAt,
    endsAt: sandbox.endsAt,
    detached: sandbox.detached,
  }))
}
