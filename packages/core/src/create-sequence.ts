import { cleanupFailureEvent } from './cleanup-failure-event.js'
import { withDeadline } from './deadline.js'
import { SandboxCreateTimeoutError } from './errors.js'
import type { SandboxEvent } from './events.js'
import type { SandboxId } from './sandbox-id.js'

export interface CreateSequenceOptions {
  readonly sandboxId: SandboxId
  /** The backend's name, for the cleanup-failure event. */
  readonly backend: string
  /** The create's budget, in ms: past it the create fails with `SandboxCreateTimeoutError` naming the step. */
  readonly timeoutMs: number
  /** The caller's signal: aborting ends the create and removes what it made. */
  readonly signal: AbortSignal | undefined
  readonly emit: (event: SandboxEvent) => void
  /** The first step's name, until the steps name another. */
  readonly firstStep: string
  /**
   * Removes what the steps made, after a failure, a timeout or an abort. A
   * removal that fails is reported as a `create.failed` event naming
   * `cleanupWhat` (the caller sees the create's own error).
   */
  readonly cleanup: () => Promise<void>
  readonly cleanupWhat: string
  /** What went wrong last before a timeout, if anything, as the timeout error's cause. */
  readonly timeoutCause?: () => Error | undefined
  /**
   * Told each step's name as it begins, the first included; the backend
   * passes its options' `onStep` here, so the provider can time the steps.
   */
  readonly onStep?: ((name: string) => void) | undefined
}

/** What a create's steps get: the deadline's signal, and `step(name)` to say where they are. */
export interface CreateSequenceSteps {
  readonly signal: AbortSignal
  readonly step: (name: string) => void
}

/**
 * The skeleton every backend's `create()` shares, written once: the steps
 * run under one deadline and the caller's signal; `step(name)` records where
 * they are, so a timeout names it; on any failure everything made is
 * removed (and a removal that fails is reported, not thrown); a sandbox that
 * arrives after the deadline or abort is destroyed rather than leaked.
 */
export function runCreateSequence<Made extends { destroy(): Promise<void> }>(
  options: CreateSequenceOptions,
  steps: (sequence: CreateSequenceSteps) => Promise<Made>,
): Promise<Made> {
  let current = options.firstStep
  options.onStep?.(current)
  const step = (name: string): void => {
    if (name === current) return
    current = name
    options.onStep?.(name)
  }
  return withDeadline((signal) => steps({ signal, step }), {
    timeoutMs: options.timeoutMs,
    signal: options.signal,
    operation: 'create',
    onTimeout: () => {
      const cause = options.timeoutCause?.()
      return new SandboxCreateTimeoutError(options.timeoutMs, current, cause ? { cause } : {})
    },
    cleanup: options.cleanup,
    disposeLate: (late) => late.destroy(),
    onCleanupError: (error) =>
      options.emit(
        cleanupFailureEvent(options.sandboxId, options.backend, options.cleanupWhat, error),
      ),
  })
}
