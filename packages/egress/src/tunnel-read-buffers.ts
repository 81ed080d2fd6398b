/**
 * The read buffers of tunnels' upstream sockets, kept for the next tunnel.
 *
 * Each tunnel reads its upstream into one 64 KiB buffer of its own. A fresh
 * buffer per tunnel is memory outside V8's heap that V8 counts: at hundreds
 * of short tunnels a second it kept starting collections (the proxy's
 * collector time was about twice proxy-chain's in a CPU profile of 5,000
 * tunnels, bench scenario 5's load). A buffer comes back here only once both
 * of its tunnel's sockets have closed: no read can land in it and no write of
 * its bytes is still queued, so the next tunnel can never send an earlier
 * tunnel's bytes. Bounded: at most `maxKept` buffers wait here; more are left
 * to the collector.
 */
export class TunnelReadBuffers {
  readonly #kept: Buffer[] = []
  readonly #bytes: number
  readonly #maxKept: number

  constructor(bytes: number, maxKept: number) {
    this.#bytes = bytes
    this.#maxKept = maxKept
  }

  take(): Buffer {
    return this.#kept.pop() ?? Buffer.allocUnsafe(this.#bytes)
  }

  /** Only once nothing reads into `buffer` and no write of its bytes is pending. */
  giveBack(buffer: Buffer): void {
    if (buffer.length === this.#bytes && this.#kept.length < this.#maxKept) this.#kept.push(buffer)
  }
}
