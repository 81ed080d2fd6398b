import type { SandboxEvent, SandboxEventListener } from '@cordon/core'

/**
 * One `onEvent` hook that calls each listener in turn, so a host can keep
 * its own hook beside cordon's telemetry. A listener that throws does not
 * keep the ones after it from seeing the event.
 */
export function chainEventListeners(
  ...listeners: ReadonlyArray<SandboxEventListener | undefined>
): SandboxEventListener {
  const present = listeners.filter(
    (listener): listener is SandboxEventListener => listener !== undefined,
  )
  return (event: SandboxEvent) => {
    for (const listener of present) {
      try {
        listener(event)
      } catch {
        // The provider would swallow it too; here it must not skip the rest.
      }
    }
  }
}
