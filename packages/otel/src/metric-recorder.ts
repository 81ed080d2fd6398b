import type { SandboxEvent, SandboxLifecycleEvent } from '@cordon/core'
import type { Counter, Histogram, Meter, UpDownCounter } from '@opentelemetry/api'
import { ATTR } from './attributes.js'
import { errorType, execOutcome } from './event-outcomes.js'
import type { TrackedSandbox } from './tracked-sandbox.js'

/** Bucket bounds in seconds: creates take from tens of milliseconds (a pool claim) to a minute. */
const CREATE_BUCKETS = [0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60]
/** Execs run from milliseconds to the longest default exec timeout. */
const EXEC_BUCKETS = [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300]

interface Instruments {
  readonly createDuration: Histogram
  readonly execDuration: Histogram
  readonly active: UpDownCounter
  readonly egressDecisions: Counter
  readonly oomKills: Counter
  readonly ended: Counter
}

function createInstruments(meter: Meter): Instruments {
  return {
    createDuration: meter.createHistogram('cordon.sandbox.create.duration', {
      description: 'Time from create.start to the sandbox being ready (or the create failing).',
      unit: 's',
      advice: { explicitBucketBoundaries: CREATE_BUCKETS },
    }),
    execDuration: meter.createHistogram('cordon.exec.duration', {
      description: 'Duration of an exec in a sandbox.',
      unit: 's',
      advice: { explicitBucketBoundaries: EXEC_BUCKETS },
    }),
    active: meter.createUpDownCounter('cordon.sandbox.active', {
      description: 'Sandboxes that are ready and not yet destroyed (pooled ones included).',
      unit: '{sandbox}',
    }),
    egressDecisions: meter.createCounter('cordon.egress.decisions', {
      description: 'Egress requests and tunnels decided by the gateway, by decision and reason.',
      unit: '{decision}',
    }),
    oomKills: meter.createCounter('cordon.sandbox.oom_kills', {
      description: 'Out-of-memory kills in sandboxes.',
      unit: '{kill}',
    }),
    ended: meter.createCounter('cordon.sandbox.ended', {
      description: 'Sandboxes that ended, by why they ended.',
      unit: '{sandbox}',
    }),
  }
}

/**
 * Turns events into metric points. Durations come from the events'
 * `durationMs` (measured by cordon on a monotonic clock) and are recorded
 * in seconds, as OpenTelemetry's conventions ask.
 */
export class MetricRecorder {
  private instruments: Instruments | undefined

  // The meter is asked for lazily, at the first event: the API's global
  // meter provider does not forward instruments made before an SDK is
  // registered, and a host may register its SDK after building the listener.
  constructor(private readonly meter: () => Meter) {}

  record(event: SandboxEvent, tracked: TrackedSandbox | undefined): void {
    this.instruments ??= createInstruments(this.meter())
    const instruments = this.instruments
    switch (event.type) {
      case 'lifecycle':
        this.lifecycle(instruments, event, tracked)
        return
      case 'exec':
        if (event.phase === 'end' && event.durationMs !== undefined) {
          instruments.execDuration.record(event.durationMs / 1000, {
            [ATTR.backend]: event.backend,
            [ATTR.execOutcome]: execOutcome(event),
          })
        }
        return
      case 'egress':
        instruments.egressDecisions.add(1, {
          [ATTR.egressDecision]: event.decision,
          [ATTR.egressReason]: event.reason,
          [ATTR.egressKind]: event.kind,
        })
        return
      case 'file':
        return
    }
  }

  /** A sandbox no longer followed is no longer counted as active: its end could not be subtracted. */
  forget(tracked: TrackedSandbox): void {
    if (!tracked.active || !this.instruments) return
    tracked.active = false
    this.instruments.active.add(-1, { [ATTR.backend]: tracked.backend })
  }

  private lifecycle(
    instruments: Instruments,
    event: SandboxLifecycleEvent,
    tracked: TrackedSandbox | undefined,
  ): void {
    const backend = { [ATTR.backend]: event.backend }
    switch (event.phase) {
      case 'create.ready':
      case 'create.failed':
        // A create.failed without a duration is a cleanup report, not a create.
        if (event.durationMs === undefined) return
        instruments.createDuration.record(
          event.durationMs / 1000,
          event.error ? { ...backend, [ATTR.errorType]: errorType(event.error) } : backend,
        )
        if (event.phase === 'create.ready' && tracked && !tracked.active) {
          tracked.active = true
          instruments.active.add(1, backend)
        }
        return
      case 'oom':
        instruments.oomKills.add(1, backend)
        if (tracked) tracked.oomCounted = true
        return
      case 'destroy.end':
        if (tracked?.active) {
          tracked.active = false
          instruments.active.add(-1, backend)
        }
        if (event.endReason) {
          instruments.ended.add(1, { ...backend, [ATTR.endReason]: event.endReason })
          // A sandbox killed as a whole for memory is an OOM kill, unless its
          // `oom` event already counted it.
          if (event.endReason === 'out-of-memory' && !tracked?.oomCounted) {
            instruments.oomKills.add(1, backend)
          }
        }
        return
      default:
        return
    }
  }
}
