/**
 * The agent's own deadlines (the sandbox's lifetime, each command's
 * timeout), counted in time the sandbox could run. A host that freezes the
 * sandbox (`pause()`) holds the clock first (`pause-clocks`) and releases
 * it once the sandbox runs again (`resume-clocks`): while it is held no
 * deadline passes, and each one moves later by the time held. Without the
 * hold, the frozen time would count (the monotonic clock goes on while a
 * cgroup is frozen, under runc and gVisor alike), and every deadline that
 * fell inside a pause would fire the moment the sandbox thawed.
 */
export class DeadlineClock {
  private heldSince: number | undefined
  private heldTotal = 0
  private readonly pending = new Set<Deadline>()

  /** Running time in ms from an arbitrary origin, without the time held. */
  now(): number {
    const at = performance.now()
    return at - this.heldTotal - (this.heldSince === undefined ? 0 : at - this.heldSince)
  }

  get isHeld(): boolean {
    return this.heldSince !== undefined
  }

  /** Stops every deadline from passing until {@link release}. Holding a held clock does nothing. */
  hold(): void {
    this.heldSince ??= performance.now()
  }

  /** Lets the deadlines run again, each later by the time held; returns that time in ms. */
  release(): number {
    if (this.heldSince === undefined) return 0
    const held = performance.now() - this.heldSince
    this.heldTotal += held
    this.heldSince = undefined
    for (const deadline of this.pending) deadline.arm()
    return held
  }

  /** Calls `fire` once `ms` of running time have passed; `cancel()` stops it. */
  after(ms: number, fire: () => void): { cancel(): void } {
    const deadline = new Deadline(this, this.now() + ms, () => {
      this.pending.delete(deadline)
      fire()
    })
    this.pending.add(deadline)
    deadline.arm()
    return {
      cancel: () => {
        this.pending.delete(deadline)
        deadline.cancel()
      },
    }
  }
}

class Deadline {
  private timer: ReturnType<typeof setTimeout> | undefined

  constructor(
    private readonly clock: DeadlineClock,
    private readonly endsAt: number,
    private readonly fire: () => void,
  ) {}

  arm(): void {
    this.cancel()
    this.timer = setTimeout(() => this.check(), Math.max(0, this.endsAt - this.clock.now()))
  }

  cancel(): void {
    if (this.timer) clearTimeout(this.timer)
    this.timer = undefined
  }

  private check(): void {
    this.timer = undefined
    // Held: the release arms it again.
    if (this.clock.isHeld) return
    if (this.endsAt - this.clock.now() > 0) this.arm()
    else this.fire()
  }
}
