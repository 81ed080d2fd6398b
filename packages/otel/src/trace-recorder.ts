import type {
  SandboxEvent,
  SandboxExecEvent,
  SandboxFileEvent,
  SandboxLifecycleEvent,
} from '@cordon/core'
import {
  type Attributes,
  type Context,
  context,
  ROOT_CONTEXT,
  type Span,
  SpanStatusCode,
  type Tracer,
  trace,
} from '@opentelemetry/api'
import { ATTR } from './attributes.js'
import { type EventError, errorType, execOutcome } from './event-outcomes.js'
import { TrackedSandbox } from './tracked-sandbox.js'

/** Lifecycle phases recorded as span events on the sandbox's root span. */
const MARKER_PHASES = new Set<SandboxLifecycleEvent['phase']>([
  'pool.refill',
  'expired',
  'idle',
  'ended',
  'oom',
  'egress.resolver-refused',
])

/**
 * Builds the trace of each sandbox from its events: a root span
 * `cordon.sandbox` from the first event seen (normally `create.start`) to
 * `destroy.end`, with a child span per create, exec, file operation and
 * destroy, a span per pause and resume (drawn from its duration; a resume
 * carries how long the sandbox was paused), and the lifecycle marks
 * (`expired`, `idle`, `ended`, `oom`, pool claims) as span events on the root.
 *
 * Events of a sandbox that is not followed (one that ended, or was evicted
 * past the limit) still become spans, without the root: an exec end or a
 * file operation reported after `destroy.end` is drawn from its own
 * duration, and marks on no root are dropped.
 */
export class TraceRecorder {
  constructor(private readonly tracer: Tracer) {}

  /**
   * Starts following a sandbox: its root span begins at `timestamp`. A
   * pool's create has no caller yet, so its root starts a trace of its own;
   * the caller that claims it gets a root of its own at the claim.
   */
  startSandbox(id: string, backend: string, timestamp: number, pooled: boolean): TrackedSandbox {
    // The host's active context when the event is reported: for
    // `create.start` that is the code that called `provider.create()`, so a
    // sandbox's trace joins the request or job that asked for it. A pool
    // refill runs in the context of whatever claim set it off, which did
    // not ask for this sandbox.
    const parent = pooled ? ROOT_CONTEXT : context.active()
    const root = this.tracer.startSpan(
      'cordon.sandbox',
      { startTime: timestamp, attributes: { [ATTR.sandboxId]: id, [ATTR.backend]: backend } },
      parent,
    )
    return new TrackedSandbox(id, backend, root, trace.setSpan(parent, root))
  }

  record(event: SandboxEvent, tracked: TrackedSandbox | undefined): void {
    switch (event.type) {
      case 'lifecycle':
        this.lifecycle(event, tracked)
        return
      case 'exec':
        this.exec(event, tracked)
        return
      case 'file':
        this.file(event, tracked)
        return
      case 'egress':
        // Egress decisions are logs and a counter, not spans: a sandbox may
        // make thousands of requests, and each decision's log record carries
        // the sandbox's trace context to join them.
        return
    }
  }

  private lifecycle(event: SandboxLifecycleEvent, tracked: TrackedSandbox | undefined): void {
    const identity = this.identity(event.sandboxId, event.backend)
    switch (event.phase) {
      case 'create.start': {
        if (tracked && !tracked.create) {
          tracked.create = this.tracer.startSpan(
            'cordon.sandbox.create',
            { startTime: event.timestamp, attributes: identity },
            tracked.context,
          )
        }
        return
      }
      case 'create.ready':
      case 'create.failed': {
        if (event.phase === 'create.failed' && event.durationMs === undefined) {
          // A backend's report that removing a failed create's leftovers
          // failed: not the create's end (that is the provider's, with a duration).
          this.cleanupFailure(event, tracked)
          return
        }
        const span = this.takeOrDraw(
          tracked?.create,
          'cordon.sandbox.create',
          event,
          identity,
          tracked?.context,
        )
        if (tracked) tracked.create = undefined
        for (const [step, ms] of Object.entries(event.steps ?? {})) {
          span.setAttribute(`${ATTR.createStepPrefix}${stepAttributeName(step)}`, ms)
        }
        if (event.error) failed(span, event.error)
        span.end(event.timestamp)
        if (event.phase === 'create.failed' && tracked) {
          // The sandbox never came to be: its trace ends with the create.
          tracked.endOpenChildren(event.timestamp, 'sandbox-ended')
          if (event.error) failed(tracked.root, event.error)
          tracked.root.end(event.timestamp)
        }
        return
      }
      case 'destroy.start': {
        if (!tracked) return
        if (tracked.destroy) {
          // The earlier attempt threw (no `destroy.end` is reported then) and this is the retry.
          tracked.destroy.setAttribute(ATTR.unfinished, 'superseded')
          tracked.destroy.setStatus({
            code: SpanStatusCode.ERROR,
            message: 'destroy did not finish',
          })
          tracked.destroy.end(event.timestamp)
        }
        tracked.destroy = this.tracer.startSpan(
          'cordon.sandbox.destroy',
          { startTime: event.timestamp, attributes: identity },
          tracked.context,
        )
        return
      }
      case 'destroy.end': {
        const span = this.takeOrDraw(
          tracked?.destroy,
          'cordon.sandbox.destroy',
          event,
          identity,
          tracked?.context,
        )
        if (tracked) tracked.destroy = undefined
        if (event.endReason) span.setAttribute(ATTR.endReason, event.endReason)
        span.end(event.timestamp)
        if (tracked) {
          tracked.endOpenChildren(event.timestamp, 'sandbox-ended')
          if (event.endReason) tracked.root.setAttribute(ATTR.endReason, event.endReason)
          tracked.root.end(event.timestamp)
        }
        return
      }
      case 'pause':
      case 'resume': {
        // Reported once each, when the freeze or thaw is done, with its duration.
        const span = this.draw(`cordon.sandbox.${event.phase}`, event, identity, tracked?.context)
        if (event.pausedMs !== undefined) span.setAttribute(ATTR.pausedMs, event.pausedMs)
        if (event.error) failed(span, event.error)
        span.end(event.timestamp)
        return
      }
      case 'pool.claim': {
        if (tracked) this.claim(event, tracked)
        return
      }
      case 'pool.refill.failed':
        // Carries no sandbox; the failed create it follows has its own span.
        return
      default: {
        if (!tracked || !MARKER_PHASES.has(event.phase)) return
        const attributes: Attributes = {}
        if (event.endReason) attributes[ATTR.endReason] = event.endReason
        if (event.error) attributes[ATTR.errorType] = errorType(event.error)
        tracked.root.addEvent(`cordon.sandbox.${event.phase}`, attributes, event.timestamp)
      }
    }
  }

  /**
   * A pooled sandbox handed to a caller. A span cannot be re-parented once
   * started, so its warm-up root ends here and a new root starts as a child
   * of the claimer's active span (`pool.claim` is reported inside its
   * `provider.create()`), linked to the warm-up; the sandbox's execs, file
   * operations and destroy go under the new root.
   */
  private claim(event: SandboxLifecycleEvent, tracked: TrackedSandbox): void {
    const warmUp = tracked.root
    warmUp.addEvent('cordon.sandbox.pool.claim', {}, event.timestamp)
    warmUp.end(event.timestamp)
    const parent = context.active()
    const root = this.tracer.startSpan(
      'cordon.sandbox',
      {
        startTime: event.timestamp,
        attributes: this.identity(event.sandboxId, event.backend),
        links: [{ context: warmUp.spanContext() }],
      },
      parent,
    )
    root.addEvent('cordon.sandbox.pool.claim', {}, event.timestamp)
    tracked.reroot(root, trace.setSpan(parent, root))
  }

  private exec(event: SandboxExecEvent, tracked: TrackedSandbox | undefined): void {
    const identity = this.identity(event.sandboxId, event.backend)
    if (event.phase === 'start') {
      if (!tracked) return
      tracked.execs.push({
        command: event.command,
        startedAt: event.timestamp,
        span: this.tracer.startSpan(
          'cordon.exec',
          {
            startTime: event.timestamp,
            attributes: { ...identity, [ATTR.command]: event.command },
          },
          tracked.context,
        ),
      })
      return
    }
    const open = tracked?.takeExec(event.command, event.timestamp, event.durationMs)
    const span =
      open?.span ??
      this.draw(
        'cordon.exec',
        event,
        { ...identity, [ATTR.command]: event.command },
        tracked?.context,
      )
    const outcome = execOutcome(event)
    if (event.exitCode !== undefined) span.setAttribute(ATTR.exitCode, event.exitCode)
    span.setAttribute(ATTR.execOutcome, outcome)
    if (event.timedOut !== undefined) span.setAttribute(ATTR.execTimedOut, event.timedOut)
    if (event.aborted !== undefined) span.setAttribute(ATTR.execAborted, event.aborted)
    if (event.error) failed(span, event.error)
    else if (outcome === 'timed-out' || outcome === 'aborted' || outcome === 'failed') {
      // A non-zero exit is the command's answer, not a failure of the exec;
      // a timeout, an abort or an exec that never produced a result is.
      span.setAttribute(ATTR.errorType, outcome)
      span.setStatus({ code: SpanStatusCode.ERROR, message: `exec ${outcome}` })
    }
    span.end(event.timestamp)
  }

  private file(event: SandboxFileEvent, tracked: TrackedSandbox | undefined): void {
    const attributes: Attributes = {
      ...this.identity(event.sandboxId, event.backend),
      [ATTR.fileOperation]: event.operation,
      [ATTR.filePath]: event.path,
    }
    if (event.bytes !== undefined) attributes[ATTR.fileBytes] = event.bytes
    if (event.files !== undefined) attributes[ATTR.fileCount] = event.files
    // File events are reported once, when the operation ends, with its duration.
    const span = this.draw(`cordon.file.${event.operation}`, event, attributes, tracked?.context)
    if (event.error) failed(span, event.error)
    span.end(event.timestamp)
  }

  private cleanupFailure(event: SandboxLifecycleEvent, tracked: TrackedSandbox | undefined): void {
    const span = this.tracer.startSpan(
      'cordon.sandbox.cleanup',
      { startTime: event.timestamp, attributes: this.identity(event.sandboxId, event.backend) },
      tracked?.context ?? context.active(),
    )
    if (event.error) failed(span, event.error)
    span.end(event.timestamp)
  }

  /** The span a start event opened, or one drawn from the end event's duration when none was. */
  private takeOrDraw(
    open: Span | undefined,
    name: string,
    event: { timestamp: number; durationMs?: number },
    attributes: Attributes,
    parent: Context | undefined,
  ): Span {
    return open ?? this.draw(name, event, attributes, parent)
  }

  /** A span that started `durationMs` before the event (a zero-length one when no duration is known). */
  private draw(
    name: string,
    event: { timestamp: number; durationMs?: number },
    attributes: Attributes,
    parent: Context | undefined,
  ): Span {
    return this.tracer.startSpan(
      name,
      { startTime: event.timestamp - (event.durationMs ?? 0), attributes },
      parent ?? context.active(),
    )
  }

  private identity(sandboxId: string | undefined, backend: string): Attributes {
    return sandboxId === undefined
      ? { [ATTR.backend]: backend }
      : { [ATTR.sandboxId]: sandboxId, [ATTR.backend]: backend }
  }
}

function failed(span: Span, error: EventError): void {
  span.setAttribute(ATTR.errorType, errorType(error))
  span.setStatus({ code: SpanStatusCode.ERROR, message: error.message })
}

/** A backend's step name (`creating the container`) as an attribute name's last part (`creating_the_container`). */
export function stepAttributeName(step: string): string {
  return step
    .toLowerCase()
    .replace(/[^a-z0-9]+/g, '_')
    .replace(/^_+|_+$/g, '')
}
