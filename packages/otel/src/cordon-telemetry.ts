import type { SandboxEvent, SandboxEventListener } from '@cordon/core'
import {
  type Meter,
  type MeterProvider,
  metrics,
  type Tracer,
  type TracerProvider,
  trace,
} from '@opentelemetry/api'
import { EgressLogRecorder } from './egress-log-recorder.js'
import type { CordonLogger, CordonLoggerProvider } from './log-emitter.js'
import { MetricRecorder } from './metric-recorder.js'
import { TraceRecorder } from './trace-recorder.js'
import { TrackedSandboxes } from './tracked-sandboxes.js'

/** The instrumentation scope name of cordon's tracer, meter and logger. */
export const INSTRUMENTATION_SCOPE = '@cordon/otel'

/** Default for `maxTrackedSandboxes`. */
export const DEFAULT_MAX_TRACKED_SANDBOXES = 10_000

export interface CordonTelemetryOptions {
  /** Default: `tracerProvider`'s, else the global tracer provider's, tracer named `@cordon/otel`. */
  readonly tracer?: Tracer
  readonly tracerProvider?: TracerProvider
  /** Default: `meterProvider`'s, else the global meter provider's, meter named `@cordon/otel`. */
  readonly meter?: Meter
  readonly meterProvider?: MeterProvider
  /**
   * Where egress decision logs go: a `Logger` of `@opentelemetry/api-logs`
   * (or the SDK's). Without `logger` or `loggerProvider`, no logs are
   * written: `@opentelemetry/api` has no logs API, and cordon does not
   * depend on `@opentelemetry/api-logs` for its global (pass
   * `loggerProvider: logs.getLoggerProvider()` to use it).
   */
  readonly logger?: CordonLogger
  readonly loggerProvider?: CordonLoggerProvider
  /**
   * Most sandboxes followed at once (default 10,000). Past it, the least
   * recently seen sandbox's open spans are ended, marked
   * `cordon.telemetry.unfinished: evicted`, and it is no longer counted as
   * active. Set it above the most sandboxes a host keeps at once.
   */
  readonly maxTrackedSandboxes?: number
}

export interface CordonTelemetry {
  /** The provider config's `onEvent` hook. It never throws. */
  readonly onEvent: SandboxEventListener
  /** Sandboxes followed now (for a host's own checks; bounded by `maxTrackedSandboxes`). */
  readonly trackedSandboxes: number
  /**
   * Ends every span still open, marked `cordon.telemetry.unfinished: closed`,
   * and forgets every sandbox. A pooled sandbox closed with its provider
   * reports no `destroy.end`; call this after `provider.close()` and before
   * the SDK shuts down, so those traces are exported.
   */
  endOpenSpans(): void
}

/**
 * Turns cordon's events into OpenTelemetry traces, metrics and egress
 * decision logs, through `@opentelemetry/api` only: the host brings the
 * SDK and its exporters.
 *
 * ```ts
 * const telemetry = cordonTelemetry()
 * const provider = createSandboxProvider({ backend, onEvent: telemetry.onEvent })
 * ```
 */
export function cordonTelemetry(options: CordonTelemetryOptions = {}): CordonTelemetry {
  const limit = options.maxTrackedSandboxes ?? DEFAULT_MAX_TRACKED_SANDBOXES
  if (!Number.isInteger(limit) || limit < 1) {
    throw new RangeError(`maxTrackedSandboxes must be a positive integer, got ${limit}`)
  }
  const tracer =
    options.tracer ??
    (options.tracerProvider ?? trace.getTracerProvider()).getTracer(INSTRUMENTATION_SCOPE)
  const traces = new TraceRecorder(tracer)
  const metricRecorder = new MetricRecorder(
    () =>
      options.meter ??
      (options.meterProvider ?? metrics.getMeterProvider()).getMeter(INSTRUMENTATION_SCOPE),
  )
  const logger = options.logger ?? options.loggerProvider?.getLogger(INSTRUMENTATION_SCOPE)
  const egressLogs = logger ? new EgressLogRecorder(logger) : undefined
  const sandboxes = new TrackedSandboxes(limit, (evicted) => {
    evicted.abandon(Date.now(), 'evicted')
    metricRecorder.forget(evicted)
  })

  const handle = (event: SandboxEvent): void => {
    const id = event.sandboxId
    let tracked = id === undefined ? undefined : sandboxes.touch(id)
    if (!tracked && id !== undefined && event.type !== 'egress' && startsTracking(event)) {
      tracked = traces.startSandbox(
        id,
        event.backend,
        event.timestamp,
        event.type === 'lifecycle' && event.pooled === true,
      )
      sandboxes.add(tracked)
    }
    traces.record(event, tracked)
    metricRecorder.record(event, tracked)
    if (event.type === 'egress') egressLogs?.record(event, tracked)
    if (tracked && endsSandbox(event)) sandboxes.forget(tracked.id)
  }

  return {
    onEvent: (event) => {
      try {
        handle(event)
      } catch {
        // Telemetry must never break the host: a throwing exporter or a
        // malformed event loses its own record and nothing else.
      }
    },
    get trackedSandboxes() {
      return sandboxes.size
    },
    endOpenSpans() {
      const now = Date.now()
      for (const tracked of sandboxes.drain()) {
        tracked.abandon(now, 'closed')
        metricRecorder.forget(tracked)
      }
    },
  }
}

/**
 * Events that begin (or, for a sandbox first seen mid-life, stand for)
 * a sandbox's existence. Any other event of an unknown sandbox (an exec end
 * or a file operation reported after its destroy, an egress decision) is
 * recorded without starting to follow it, or it would never be forgotten.
 */
function startsTracking(event: SandboxEvent): boolean {
  if (event.type === 'exec') return event.phase === 'start'
  if (event.type !== 'lifecycle') return false
  return (
    event.phase === 'create.start' ||
    event.phase === 'create.ready' ||
    event.phase === 'destroy.start' ||
    event.phase === 'pool.claim' ||
    event.phase === 'pool.refill'
  )
}

/** The events after which nothing more is expected of a sandbox. */
function endsSandbox(event: SandboxEvent): boolean {
  if (event.type !== 'lifecycle') return false
  // A create.failed without a duration is a backend's cleanup report, not the create's end.
  return (
    event.phase === 'destroy.end' ||
    (event.phase === 'create.failed' && event.durationMs !== undefined)
  )
}
