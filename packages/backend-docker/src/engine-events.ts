import { createInterface } from 'node:readline'
import { LABEL } from '@cordon/core/backend'
import type Docker from 'dockerode'

type DeathListener = () => void

/**
 * Follows the engine's `oom`, `kill` and `die` events for one provider's containers.
 * `oom` tells an exec that died of SIGKILL apart: killed by the OOM killer
 * (reported as `oomKilled`) or by something else. `die` ends the execs of a
 * container that stopped underneath them: under gVisor an out-of-memory kill
 * takes the whole sandbox down, and the engine would otherwise keep an exec
 * waiting on a process that no longer exists. `kill` says the engine was
 * asked to signal the container (a destroy, a person's `docker kill`), so
 * that a SIGKILL it was not asked for can be told apart (end-reason.ts).
 */
export class EngineEvents {
  private readonly lastOom = new Map<string, number>()
  private readonly exitCodes = new Map<string, number>()
  private readonly killed = new Set<string>()
  private readonly exitListeners = new Set<() => void>()
  private readonly deathListeners = new Map<string, Set<DeathListener>>()
  private readonly oomListeners = new Set<() => void>()
  private stream: NodeJS.ReadableStream | undefined
  private starting: Promise<void> | undefined

  constructor(
    private readonly docker: Docker,
    private readonly providerId: string,
  ) {}

  /** Starts following events; idempotent, and retried on the next call if it failed. */
  start(): Promise<void> {
    this.starting ??= this.open().catch(() => {
      this.starting = undefined
    })
    return this.starting
  }

  private async open(): Promise<void> {
    const stream = (await this.docker.getEvents({
      filters: {
        type: ['container'],
        event: ['oom', 'kill', 'die'],
        label: [`${LABEL.provider}=${this.providerId}`],
      },
    })) as NodeJS.ReadableStream
    this.stream = stream
    // Following events is background work: it must not keep a host process
    // alive once the host has nothing left to do (the reference's providers
    // had no close(), so hosts written for it never call one).
    ;(stream as { socket?: { unref?: () => void } }).socket?.unref?.()
    // readline decodes across chunk boundaries, so a character split between
    // two reads arrives whole.
    const lines = createInterface({ input: stream, crlfDelay: Number.POSITIVE_INFINITY })
    lines.on('line', (line) => this.handle(line))
    // readline re-emits the stream's errors; the stream's own handler resets.
    lines.on('error', () => {})
    const reset = () => {
      if (this.stream === stream) {
        this.starting = undefined
        this.stream = undefined
      }
      // No `die` will come over a broken stream (the engine may be gone): stop waiting for one.
      for (const listener of this.exitListeners) listener()
    }
    stream.on('error', reset)
    stream.on('end', reset)
  }

  private handle(line: string): void {
    let event: {
      id?: string
      status?: string
      Action?: string
      Actor?: { ID?: string; Attributes?: { exitCode?: string } }
    }
    try {
      event = JSON.parse(line)
    } catch {
      return
    }
    const id = event.id ?? event.Actor?.ID
    if (!id) return
    const action = event.Action ?? event.status
    if (action === 'oom') {
      this.lastOom.set(id, Date.now())
      for (const listener of this.oomListeners) listener()
    } else if (action === 'kill') {
      this.killed.add(id)
    } else if (action === 'die') {
      const exitCode = Number(event.Actor?.Attributes?.exitCode)
      if (Number.isInteger(exitCode)) this.exitCodes.set(id, exitCode)
      for (const listener of this.deathListeners.get(id) ?? []) listener()
      for (const listener of this.exitListeners) listener()
    }
  }

  /** Calls `listener` if the container dies; returns the unsubscribe function. */
  onDeath(containerId: string, listener: DeathListener): () => void {
    let listeners = this.deathListeners.get(containerId)
    if (!listeners) {
      listeners = new Set()
      this.deathListeners.set(containerId, listeners)
    }
    listeners.add(listener)
    return () => {
      listeners.delete(listener)
      if (listeners.size === 0) this.deathListeners.delete(containerId)
    }
  }

  /** True if the container had an OOM kill at or after `sinceMs`, waiting up to `graceMs` for the event. */
  async oomSince(containerId: string, sinceMs: number, graceMs: number): Promise<boolean> {
    const seen = () => (this.lastOom.get(containerId) ?? 0) >= sinceMs
    await this.waitUntil(this.oomListeners, seen, graceMs)
    return seen()
  }

  /**
   * True if the engine was asked to signal the container (its `kill` event,
   * which the engine sends before the signal, so before the `die` it causes).
   */
  killRequested(containerId: string): boolean {
    return this.killed.has(containerId)
  }

  /**
   * The container's exit status from its `die` event, waiting up to
   * `graceMs` for it; undefined if none came (or the event stream broke,
   * as it does when the engine goes away).
   */
  async exitCode(containerId: string, graceMs: number): Promise<number | undefined> {
    await this.waitUntil(
      this.exitListeners,
      () => this.exitCodes.has(containerId) || !this.stream,
      graceMs,
    )
    return this.exitCodes.get(containerId)
  }

  /** Resolves once `done()` holds, checked now and whenever `listeners` are called, or after `graceMs`. */
  private waitUntil(
    listeners: Set<() => void>,
    done: () => boolean,
    graceMs: number,
  ): Promise<void> {
    if (done()) return Promise.resolve()
    return new Promise((resolve) => {
      const finish = () => {
        clearTimeout(timer)
        listeners.delete(check)
        resolve()
      }
      const check = () => {
        if (done()) finish()
      }
      const timer = setTimeout(finish, graceMs)
      listeners.add(check)
    })
  }

  forget(containerId: string): void {
    this.lastOom.delete(containerId)
    this.exitCodes.delete(containerId)
    this.killed.delete(containerId)
    this.deathListeners.delete(containerId)
  }

  close(): void {
    const stream = this.stream as (NodeJS.ReadableStream & { destroy?: () => void }) | undefined
    this.stream = undefined
    this.starting = undefined
    stream?.destroy?.()
  }
}
