/**
 * Times the steps of one create as the backend names them (see
 * `runCreateSequence`): each step lasts from when it is named until the next
 * is named or the create ends. A step named twice (a retried pull, say)
 * counts once with both stretches added. The provider puts the result on the
 * `create.ready` and `create.failed` events, where a trace shows which part
 * of a slow create was slow.
 */
export class CreateStepTimer {
  private readonly totals = new Map<string, number>()
  private current: { readonly name: string; readonly startedAt: number } | undefined

  /** Called by the backend (through `runCreateSequence`) as each step begins. */
  readonly begin = (name: string): void => {
    const now = performance.now()
    this.close(now)
    this.current = { name, startedAt: now }
  }

  /** The steps' durations in ms, rounded to tenths, with the running step closed now. */
  finish(): Readonly<Record<string, number>> | undefined {
    this.close(performance.now())
    if (this.totals.size === 0) return undefined
    return Object.fromEntries(
      [...this.totals].map(([name, ms]) => [name, Math.round(ms * 10) / 10]),
    )
  }

  private close(now: number): void {
    if (!this.current) return
    const { name, startedAt } = this.current
    this.totals.set(name, (this.totals.get(name) ?? 0) + (now - startedAt))
    this.current = undefined
  }
}
