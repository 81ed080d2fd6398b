import type { SandboxContainer } from './sandbox-container.js'

export interface StandbyPoolOptions {
  /** `maxReadyCapacity`: how many started containers the pool keeps waiting. */
  readonly size: number
  /** Starts one container of the pool. */
  readonly start: () => Promise<SandboxContainer>
  readonly onError?: (error: unknown) => void
}

/** Instance counts by state, the way the pool's runtime view reports them. */
export interface StandbyPoolCounts {
  readonly running: number
  readonly creating: number
}

/**
 * The standby pool: started containers waiting to be claimed, refilled after
 * every claim (refill policy `always`). Only a running container is handed
 * out; one still starting counts as `Creating`. A start that fails leaves its
 * slot empty until the next claim asks the pool to fill up again.
 */
export class StandbyPool {
  private readonly ready: SandboxContainer[] = []
  private readonly starting = new Set<Promise<void>>()
  private closed = false

  constructor(private readonly options: StandbyPoolOptions) {}

  counts(): StandbyPoolCounts {
    return { running: this.ready.length, creating: this.starting.size }
  }

  /** Starts containers, in the background, until the pool is at its size. */
  fill(): void {
    while (!this.closed && this.ready.length + this.starting.size < this.options.size) {
      const started: Promise<void> = this.options.start().then(
        async (container) => {
          if (this.closed) await container.remove()
          else this.ready.push(container)
        },
        (error: unknown) => this.options.onError?.(error),
      )
      this.starting.add(started)
      void started.finally(() => this.starting.delete(started))
    }
  }

  /** Hands out a running container, or undefined when none is ready; starts a replacement. */
  take(): SandboxContainer | undefined {
    const container = this.ready.shift()
    this.fill()
    return container
  }

  /** Resolves once every start under way has finished. */
  async settled(): Promise<void> {
    while (this.starting.size > 0) await Promise.allSettled([...this.starting])
  }

  /** Stops refilling and removes every waiting container. */
  async close(): Promise<void> {
    this.closed = true
    await this.settled()
    await Promise.allSettled(this.ready.splice(0).map((container) => container.remove()))
  }
}
