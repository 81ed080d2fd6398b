import type Docker from 'dockerode'
import { LABEL } from './owner-labels.js'

/**
 * Follows the engine's `oom` events for one provider's containers, so an exec
 * that died of SIGKILL can be told apart: killed by the OOM killer (reported as
 * `oomKilled`) or by something else. The engine reports OOM kills of any
 * process in a container, not only of its main process.
 */
export class OomWatch {
  private readonly lastOom = new Map<string, number>()
  private stream: NodeJS.ReadableStream | undefined
  private starting: Promise<void> | undefined
  private readonly listeners = new Set<() => void>()

  constructor(
    private readonly docker: Docker,
    private readonly providerId: string,
  ) {}

  /** Starts following events; idempotent. */
  start(): Promise<void> {
    this.starting ??= this.open().catch(() => {
      this.starting = undefined
    })
    return this.starting
  }

  private async open(): Promise<void> {
    const stream = (await this.docker.getEvents({
      filters: { type: ['container'], event: ['oom'], label: [`${LABEL.provider}=${this.providerId}`] },
    })) as NodeJS.ReadableStream
    this.stream = stream
    let buffered = ''
    stream.on('data', (chunk: Buffer) => {
      buffered += chunk.toString('utf8')
      let newline = buffered.indexOf('\n')
      while (newline >= 0) {
        const line = buffered.slice(0, newline)
        buffered = buffered.slice(newline + 1)
        newline = buffered.indexOf('\n')
        try {
          const event = JSON.parse(line) as { id?: string; Actor?: { ID?: string } }
          const id = event.id ?? event.Actor?.ID
          if (id) this.lastOom.set(id, Date.now())
        } catch {
          // A partial or foreign line; the engine sends one JSON object per line.
        }
        for (const listener of this.listeners) listener()
      }
    })
    stream.on('error', () => {
      this.starting = undefined
    })
    stream.on('end', () => {
      this.starting = undefined
    })
  }

  /** True if the container had an OOM kill at or after `sinceMs`, waiting up to `graceMs` for the event. */
  async oomSince(containerId: string, sinceMs: number, graceMs: number): Promise<boolean> {
    const seen = () => (this.lastOom.get(containerId) ?? 0) >= sinceMs
    if (seen()) return true
    return new Promise<boolean>((resolve) => {
      const listener = () => {
        if (!seen()) return
        cleanup()
        resolve(true)
      }
      const timer = setTimeout(() => {
        cleanup()
        resolve(seen())
      }, graceMs)
      const cleanup = () => {
        clearTimeout(timer)
        this.listeners.delete(listener)
      }
      this.listeners.add(listener)
    })
  }

  forget(containerId: string): void {
    this.lastOom.delete(containerId)
  }

  close(): void {
    const stream = this.stream as (NodeJS.ReadableStream & { destroy?: () => void }) | undefined
    stream?.destroy?.()
    this.stream = undefined
    this.starting = undefined
  }
}
