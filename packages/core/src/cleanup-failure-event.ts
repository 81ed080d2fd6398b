import type { SandboxLifecycleEvent } from './events.js'
import type { SandboxId } from './sandbox-id.js'

/**
 * The event a backend reports when removing what a failed create made did
 * not succeed: the create's own error is what the caller sees, and the
 * leftover is named here so a host can act on it (or `cordon gc` later).
 */
export function cleanupFailureEvent(
  sandboxId: SandboxId,
  backend: string,
  what: string,
  error: unknown,
): SandboxLifecycleEvent {
  return {
    type: 'lifecycle',
    phase: 'create.failed',
    sandboxId,
    backend,
    timestamp: Date.now(),
    error: {
      name: 'CleanupError',
      message: `${what} failed: ${(error as Error)?.message ?? String(error)}`,
    },
  }
}
