/**
 * Bounds the connections on one listener that have not proved the secret
 * yet. Anything that can reach the listener (sandbox code, on ACI the
 * subnet too) can open connections for free; unbounded, idle ones fill the
 * listener's connection limit and the host's own connection is turned away.
 * Past the bound the oldest unproved connection is dropped, so a fresh one,
 * the host's, always gets its handshake.
 */
export class PendingHandshakes {
  // A Set keeps insertion order: its first entry is the oldest.
  readonly #pending = new Set<{ destroy(): void }>()

  constructor(private readonly limit: number) {}

  /** Admits a connection; returns the call that ends its wait (proved or closed). */
  admit(connection: { destroy(): void }): () => void {
    if (this.#pending.size >= this.limit) {
      const oldest = this.#pending.values().next().value
      if (oldest !== undefined) {
        this.#pending.delete(oldest)
        oldest.destroy()
      }
    }
    this.#pending.add(connection)
    return () => {
      this.#pending.delete(connection)
    }
  }
}
