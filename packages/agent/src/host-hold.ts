import type { DeadlineClock } from './deadline-clock.js'

/**
 * Ties a sandbox that is not detached to its host when no stdio channel
 * does (a microVM guest's agent listens on a socket, and a host's
 * connections come and go per operation). The host keeps one `hold-host`
 * connection open for its whole life; while at least one is open the
 * sandbox is held. Once the last one closes (the host's process died and
 * its socket with it, or the host went silent for four heartbeats), the
 * agent waits the host's grace for a new one and otherwise ends, as a
 * Docker sandbox's agent ends when its host's attach closes. The grace is
 * counted on the agent's deadline clock, so time the host holds the
 * sandbox frozen (`pause-clocks`) does not count toward it.
 *
 * Nothing is armed until a host first asks: a detached sandbox's hosts
 * never do, and it runs until its lifetime.
 */
export class HostHold {
  private held = 0
  private countdown: { cancel(): void } | undefined
  private ended = false

  constructor(
    private readonly clock: DeadlineClock,
    /** Called once, when the grace ran out with no host holding on. */
    private readonly onGone: (graceMs: number) => void,
  ) {}

  /** Whether a host holds on now. */
  get isHeld(): boolean {
    return this.held > 0
  }

  /**
   * A host holds on from now until `released` is called (its connection
   * closed); then, unless another holds on within `graceMs`, the agent ends.
   */
  hold(graceMs: number): { release(): void } {
    this.held++
    this.countdown?.cancel()
    this.countdown = undefined
    let released = false
    return {
      release: () => {
        if (released) return
        released = true
        this.held--
        if (this.held > 0 || this.ended) return
        // The latest holder's grace: a host asks again on every connection it makes.
        this.countdown = this.clock.after(graceMs, () => {
          this.countdown = undefined
          if (this.held > 0 || this.ended) return
          this.ended = true
          this.onGone(graceMs)
        })
      },
    }
  }

  /** Stops the countdown (the agent is ending anyway). */
  stop(): void {
    this.ended = true
    this.countdown?.cancel()
    this.countdown = undefined
  }
}
