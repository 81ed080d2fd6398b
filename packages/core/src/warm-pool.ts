import type { Sandbox } from './sandbox.js'

export interface WarmPoolOptions<S extends Sandbox = Sandbox> {
  readonly size: number
  /** Creates one fresh, exec-ready sandbox for the pool. */
  readonly create: () => Promise<S>
  readonly onRefill?: (durationMs: number, sandbox: S) => void
  readonly onRefillError?: (error: unknown) => void
}

/**
 * Keeps up to `size` started, exec-ready sandboxes. Each pooled sandbox is
 * handed out once and never returned, so a claim never sees another claim's
 * state. Refills run in the background, one at a time per missing slot;
 * repeated failures back off so a broken engine is not hammered.
 */
export class WarmPool<S extends Sandbox = Sandbox> {
  private readonly ready: S[] = []
  private inFlight = 0
  private closed = false
  private failures = 0
  private readonly waiters = new Set<() => void>()

  constructor(private readonly options: WarmPoolOptions<S>) {}

  get available(): number {
    return this.ready.length
  }

  /**
   * Takes a ready sandbox, or `undefined` if none is ready now. The refill
   * starts at once when nothing was ready; after a claim it starts
   * `REFILL_AFTER_CLAIM_MS` later, so its engine work (a container start
   * costs about as much CPU as several execs) does not compete with the
   * first commands the caller runs in the sandbox it just claimed.
   */
  claim(): S | undefined {
    const sandbox = this.ready.shift()
    if (!sandbox) {
      this.fill()
      return undefined
    }
    setTimeout(() => this.fill(), REFILL_AFTER_CLAIM_MS).unref?.()
    return sandbox
  }

  /** Starts filling (a refill deferred after a claim starts now) and resolves when the pool is full (or closed). */
  async warm(): Promise<void> {
    this.fill()
    while (!this.closed && this.ready.length < this.options.size) {
      await new Promise<void>((resolve) => this.waiters.add(resolve))
      if (this.failures > 0 && this.inFlight === 0 && this.ready.length < this.options.size) {
        throw new Error('warm pool could not be filled: the last refill failed')
      }
    }
  }

  fill(): void {
    if (this.closed) return
    while (this.ready.length + this.inFlight < this.options.size) {
      this.inFlight++
      void this.refillOne()
    }
  }

  private async refillOne(): Promise<void> {
    const started = performance.now()
    try {
      if (this.failures > 0) await delay(Math.min(30_000, 250 * 2 ** (this.failures - 1)))
      const sandbox = await this.options.create()
      if (this.closed) {
        await sandbox.destroy().catch(() => {})
        return
      }
      this.failures = 0
      this.ready.push(sandbox)
      this.options.onRefill?.(performance.now() - started, sandbox)
    } catch (error) {
      this.failures++
      this.options.onRefillError?.(error)
    } finally {
      this.inFlight--
      for (const wake of this.waiters) wake()
      this.waiters.clear()
    }
    if (this.failures > 0 && this.failures < 6) this.fill()
  }

  /**
   * Stops refilling and destroys every sandbox still waiting in the pool,
   * including one whose refill finishes meanwhile. The wait for such a
   * refill keeps the host process alive: what the refill is waiting on may
   * hold no reference to the event loop (a spare connection, the engine's
   * event stream), and a host that awaits `close()` and exits must not exit
   * halfway, leaving the refilled sandbox behind.
   */
  async close(): Promise<void> {
    this.closed = true
    const drained = this.ready.splice(0)
    await Promise.allSettled(drained.map((sandbox) => sandbox.destroy()))
    for (const wake of this.waiters) wake()
    this.waiters.clear()
    while (this.inFlight > 0) await new Promise((resolve) => setTimeout(resolve, 20))
  }
}

/** How long a refill waits after a claim (see `claim`). */
export const REFILL_AFTER_CLAIM_MS = 250

function delay(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms).unref?.())
}
