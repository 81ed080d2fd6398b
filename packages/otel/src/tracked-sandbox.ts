import type { Context, Span } from '@opentelemetry/api'
import { ATTR, type UnfinishedBecause } from './attributes.js'

export interface OpenExec {
  readonly command: string
  /** Wall-clock start, from the `start` event. */
  readonly startedAt: number
  readonly span: Span
}

/**
 * What cordon's telemetry remembers about one live sandbox: its root span,
 * the child spans still open under it, and whether the metrics have counted
 * it as active or counted its OOM kill. Forgotten when the sandbox ends.
 */
export class TrackedSandbox {
  create: Span | undefined
  destroy: Span | undefined
  readonly execs: OpenExec[] = []
  /** Counted in `cordon.sandbox.active` (so its end is subtracted once). */
  active = false
  /** An `oom` event was counted, so an `out-of-memory` end is not counted again. */
  oomCounted = false

  constructor(
    readonly id: string,
    readonly backend: string,
    private rootSpan: Span,
    private rootContext: Context,
  ) {}

  /** The sandbox's root span: since its claim, for a pooled sandbox. */
  get root(): Span {
    return this.rootSpan
  }

  /** The context with `root` as its span: the parent of every child span. */
  get context(): Context {
    return this.rootContext
  }

  /** From now on, child spans go under `root` (a pooled sandbox's claim). */
  reroot(root: Span, context: Context): void {
    this.rootSpan = root
    this.rootContext = context
  }

  /**
   * Takes the open exec span that a `end` event belongs to. Two execs of one
   * command may run at once; the end's own duration says when its exec
   * started, so the open span that started closest to that is the one.
   */
  takeExec(command: string, endedAt: number, durationMs: number | undefined): OpenExec | undefined {
    let best = -1
    let bestDistance = Number.POSITIVE_INFINITY
    for (const [index, open] of this.execs.entries()) {
      if (open.command !== command) continue
      // Without a duration, the oldest open exec of the command.
      const distance =
        durationMs === undefined ? index : Math.abs(open.startedAt - (endedAt - durationMs))
      if (distance < bestDistance) {
        best = index
        bestDistance = distance
      }
    }
    return best < 0 ? undefined : this.execs.splice(best, 1)[0]
  }

  /** Ends every child span still open, at `time`, marked with why it never got its own end. */
  endOpenChildren(time: number, because: UnfinishedBecause): void {
    const open = [
      this.create,
      this.destroy,
      ...this.execs.splice(0).map((exec) => exec.span),
    ].filter((span): span is Span => span !== undefined)
    this.create = undefined
    this.destroy = undefined
    for (const span of open) {
      span.setAttribute(ATTR.unfinished, because)
      span.end(time)
    }
  }

  /** Ends the children and the root: for a sandbox that is no longer followed, not one that ended. */
  abandon(time: number, because: UnfinishedBecause): void {
    this.endOpenChildren(time, because)
    this.root.setAttribute(ATTR.unfinished, because)
    this.root.end(time)
  }
}
