import type { SandboxExecEvent, SandboxExecOutcome, SandboxLifecycleEvent } from '@cordon/core'

export type EventError = NonNullable<SandboxLifecycleEvent['error']>

/** `error.type`: the error's code when it has one (a stable string), else its class name. */
export function errorType(error: EventError): string {
  return error.code ?? error.name
}

/**
 * How an exec ended, as one low-cardinality value for spans and metrics:
 * the event's own `outcome`, else read from its fields: `exited` (with any
 * exit code), `timed-out`, `aborted`, or `failed` (the exec produced no
 * result, e.g. its sandbox was lost).
 */
export function execOutcome(event: SandboxExecEvent): SandboxExecOutcome {
  if (event.outcome) return event.outcome
  if (event.timedOut) return 'timed-out'
  if (event.aborted) return 'aborted'
  if (event.exitCode === undefined) return 'failed'
  return 'exited'
}
