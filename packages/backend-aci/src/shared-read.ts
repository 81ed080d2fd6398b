import { untilAborted } from './until-aborted.js'

/**
 * One read of a remote fact shared by every caller for `ttlMs`. The read runs
 * under no caller's signal, so one caller giving up does not fail the others
 * waiting on it; each caller waits under its own signal. A read that fails is
 * forgotten at once, so the next caller reads again rather than inheriting
 * the failure.
 */
export class SharedRead<T> {
  private current: { readonly value: Promise<T>; readonly readAt: number } | undefined

  constructor(
    private readonly read: () => Promise<T>,
    private readonly ttlMs: number,
    private readonly now: () => number = Date.now,
  ) {}

  get(signal: AbortSignal, operation: string): Promise<T> {
    if (!this.current || this.now() - this.current.readAt > this.ttlMs) {
      const value = this.read()
      this.current = { value, readAt: this.now() }
      value.catch(() => {
        if (this.current?.value === value) this.current = undefined
      })
    }
    return untilAborted(this.current.value, signal, operation)
  }
}
