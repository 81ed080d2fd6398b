/**
 * Writing many small files on the host, the same way for every arm that
 * writes them itself (cordon's and testcontainers'): up to 16 writes in
 * flight, directories made once. One write at a time would measure Node's
 * thread-pool round trips (about 0.5 ms per file here) rather than the
 * transfer; `docker cp` writes its files in Go.
 */
import { mkdir, writeFile } from 'node:fs/promises'
import { dirname } from 'node:path'

const IN_FLIGHT = 16

export class HostFileWriter {
  private readonly pending = new Set<Promise<void>>()
  private readonly madeDirs = new Map<string, Promise<unknown>>()
  private failure: unknown
  written = 0

  /** Queues one file; waits only when 16 writes are already in flight. */
  async write(path: string, content: Uint8Array): Promise<void> {
    if (this.failure !== undefined) throw this.failure
    while (this.pending.size >= IN_FLIGHT) await Promise.race(this.pending)
    const dir = dirname(path)
    let made = this.madeDirs.get(dir)
    if (!made) {
      made = mkdir(dir, { recursive: true })
      this.madeDirs.set(dir, made)
    }
    const task = made
      .then(() => writeFile(path, content))
      .then(
        () => {
          this.written += 1
        },
        (error: unknown) => {
          this.failure ??= error
        },
      )
      .finally(() => this.pending.delete(task))
    this.pending.add(task)
  }

  /** Waits for every queued write; rethrows the first failure. */
  async finish(): Promise<number> {
    while (this.pending.size > 0) await Promise.race(this.pending)
    if (this.failure !== undefined) throw this.failure
    return this.written
  }
}
