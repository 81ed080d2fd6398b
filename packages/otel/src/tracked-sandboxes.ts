import type { TrackedSandbox } from './tracked-sandbox.js'

/**
 * The sandboxes being followed, at most `limit` of them. A sandbox is
 * forgotten when it ends; one whose end is never reported (a destroy that
 * failed and was not retried, a pooled sandbox closed with its provider, a
 * provider dropped without `close()`) would otherwise be kept forever, so
 * past the limit the least recently seen one is handed to `onEvict` and
 * dropped. Memory is bounded by the limit whatever the events.
 */
export class TrackedSandboxes {
  // A Map iterates in insertion order; re-inserting on every touch keeps the
  // least recently seen sandbox first.
  private readonly byId = new Map<string, TrackedSandbox>()

  constructor(
    private readonly limit: number,
    private readonly onEvict: (sandbox: TrackedSandbox) => void,
  ) {}

  get size(): number {
    return this.byId.size
  }

  /** The sandbox, marked as just seen; undefined if it is not followed. */
  touch(id: string): TrackedSandbox | undefined {
    const found = this.byId.get(id)
    if (found) {
      this.byId.delete(id)
      this.byId.set(id, found)
    }
    return found
  }

  add(sandbox: TrackedSandbox): void {
    this.byId.delete(sandbox.id)
    this.byId.set(sandbox.id, sandbox)
    while (this.byId.size > this.limit) {
      const [oldest] = this.byId.values()
      if (!oldest) break
      this.byId.delete(oldest.id)
      this.onEvict(oldest)
    }
  }

  forget(id: string): void {
    this.byId.delete(id)
  }

  /** Forgets every sandbox, returning them. */
  drain(): TrackedSandbox[] {
    const all = [...this.byId.values()]
    this.byId.clear()
    return all
  }
}
