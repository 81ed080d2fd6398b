import type { SandboxLifecycleEvent } from './events.js'
import type { SandboxId } from './sandbox-id.js'

/**
 * The event a backend reports when `askResolver` refused a `resolver`
 * policy's answer for a sandbox, so the host learns why that sandbox can
 * reach nothing (the problem names the offending entry when there is one).
 */
export function resolverRefusedEvent(
  sandboxId: SandboxId,
  backend: string,
  problem: string,
): SandboxLifecycleEvent {
  return {
    type: 'lifecycle',
    phase: 'egress.resolver-refused',
    sandboxId,
    backend,
    timestamp: Date.now(),
    error: { name: 'ResolverAnswerRefused', message: problem },
  }
}
