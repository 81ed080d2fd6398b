import { constants } from 'node:os'
import type { DeadlineClock } from './deadline-clock.js'
import { endedByOomKill, readOomKillCount } from './oom-counter.js'
import { AgentOperationError } from './operation-error.js'
import type { LaunchedProcess } from './process-launcher.js'
import { type ExecIdentity, signalExecProcesses } from './process-tree.js'
import type { FramedConnection } from './protocol/framed-connection.js'
import {
  type ExitMessage,
  type KillSignalName,
  type ProcessEntryMessage,
  parseClientMessage,
} from './protocol/messages.js'
import { randomBytes } from './random-bytes.js'

/**
 * Output of one kept process held while nobody is attached; past it the
 * oldest bytes are dropped and the next `attach` says how many.
 */
export const KEPT_OUTPUT_BYTES = 1024 * 1024
/** Output held for all kept processes together: the agent's memory is the sandbox's. */
export const KEPT_OUTPUT_TOTAL_BYTES = 8 * 1024 * 1024
/** Ended processes still listed (with their exit and unread output); the oldest go first. */
export const KEPT_ENDED_PROCESSES = 64
/** While attached, output queued past this pauses the command's pipes until the connection takes it. */
const ATTACHED_HIGH_WATER_BYTES = 256 * 1024
/** After a SIGTERM kill, how long the tree gets before SIGKILL. */
const TERM_GRACE_MS = 2_000

type OutputChannel = 'stdout' | 'stderr'

interface Attachment {
  readonly connection: FramedConnection
  /** Stdin bytes this connection handed the command (acknowledgements count per connection). */
  written: number
  wake: (() => void) | undefined
  done: boolean
}

export interface KeptProcessStart {
  readonly child: LaunchedProcess
  readonly marker: string
  readonly command: string
  readonly args: readonly string[]
  readonly runAs: { readonly uid: number; readonly gid: number } | undefined
  readonly timeoutMs: number | undefined
  /** Times `timeoutMs` in running time: a pause of the sandbox does not count. */
  readonly clock: DeadlineClock
}

/**
 * A command started with `keep`: it outlives the connection that started it.
 * Its output goes to the connection attached to it, if any, with the
 * connection's backpressure; while nobody is attached it is held (up to
 * {@link KEPT_OUTPUT_BYTES}, the oldest bytes dropped first) and replayed,
 * in order, to the next connection that attaches. It ends by itself, by its
 * timeout, by a `cancel` from an attached connection, or with the agent.
 */
export class KeptProcess {
  readonly id = `proc_${randomBytes(10).toString('hex')}`
  readonly pid: number
  readonly startedAt = Date.now()
  private readonly started = performance.now()
  private endedAt: number | undefined
  private exit: ExitMessage | undefined
  private readonly queue: Array<{ channel: OutputChannel; data: Buffer }> = []
  private queuedBytes = 0
  private droppedBytes = 0
  private attachment: Attachment | undefined
  private stdinClosed: boolean
  private timedOut = false
  private aborted = false
  private killTimer: ReturnType<typeof setTimeout> | undefined
  private readonly timeout: { cancel(): void } | undefined
  private readonly oomBefore = readOomKillCount()
  private paused = false

  constructor(
    private readonly start: KeptProcessStart,
    private readonly registry: KeptProcessRegistry,
  ) {
    const { child } = start
    this.pid = child.pid
    this.stdinClosed = child.stdin === undefined
    child.stdin?.on('error', () => this.closeStdin())
    void child.exited.then(() => this.closeStdin())
    child.stdout.on('data', (chunk: Buffer) => this.push('stdout', chunk))
    child.stderr.on('data', (chunk: Buffer) => this.push('stderr', chunk))
    this.timeout =
      start.timeoutMs === undefined
        ? undefined
        : start.clock.after(start.timeoutMs, () => {
            if (this.exit) return
            this.timedOut = true
            this.kill('SIGKILL')
          })
    void child.closed.then(({ code, signal }) => this.finish(code, signal))
  }

  get running(): boolean {
    return this.exit === undefined
  }

  /** Bytes held for the next attach. */
  get heldBytes(): number {
    return this.attachment ? 0 : this.queuedBytes
  }

  describe(): ProcessEntryMessage {
    const exit = this.exit
    return {
      id: this.id,
      pid: this.pid,
      command: this.start.command,
      args: this.start.args,
      running: exit === undefined,
      startedAt: this.startedAt,
      attached: this.attachment !== undefined,
      ...(this.endedAt === undefined ? {} : { endedAt: this.endedAt }),
      ...(exit === undefined ? {} : { exitCode: exit.exitCode }),
      ...(exit?.signal ? { signal: exit.signal } : {}),
    }
  }

  /** What a kill of this process ends (process-tree.ts). */
  private get exec(): ExecIdentity {
    return { rootPid: this.pid, marker: this.start.marker, group: this.start.child.execGroup }
  }

  kill(signal: KillSignalName): void {
    if (this.exit) return
    signalExecProcesses(this.exec, signal, this.start.runAs)
    if (signal === 'SIGTERM' && !this.killTimer) {
      this.killTimer = setTimeout(
        () => signalExecProcesses(this.exec, 'SIGKILL', this.start.runAs),
        TERM_GRACE_MS,
      )
      this.killTimer.unref?.()
    }
  }

  /**
   * Serves one connection attached to the process until the process ends
   * (the connection gets `exit`) or the connection goes (the process goes on,
   * its output held). With `replay`, `attached` and the held output come
   * first. A connection attached before is detached.
   */
  async serve(connection: FramedConnection, replay: boolean): Promise<void> {
    const previous = this.attachment
    if (previous) {
      this.detach(previous)
      void previous.connection
        .send({
          type: 'error',
          code: 'detached',
          message: 'another connection attached to the process',
        })
        .catch(() => {})
        .finally(() => previous.connection.close())
    }
    const attachment: Attachment = { connection, written: 0, wake: undefined, done: false }
    this.attachment = attachment
    this.registry.released(this)
    if (replay) {
      const dropped = this.droppedBytes
      this.droppedBytes = 0
      await connection.send({ type: 'attached', pid: this.pid, droppedBytes: dropped })
    }
    connection.onClose(() => this.detach(attachment))
    void this.control(attachment).catch(() => this.detach(attachment))
    if (this.stdinClosed) this.acknowledge(attachment)
    for (;;) {
      if (attachment.done) return
      const next = this.queue[0]
      if (next) {
        try {
          await connection.sendData(next.channel, next.data)
        } catch {
          this.detach(attachment)
          return
        }
        // Taken only once sent: a connection that breaks mid-chunk leaves it for the next.
        if (this.queue[0] === next) {
          this.queue.shift()
          this.queuedBytes -= next.data.byteLength
          this.registry.held(-next.data.byteLength)
        }
        this.resumeIfDrained()
        continue
      }
      if (this.exit) {
        await connection.send(this.exit).catch(() => {})
        attachment.done = true
        if (this.attachment === attachment) this.attachment = undefined
        connection.close()
        this.registry.ended(this)
        return
      }
      await new Promise<void>((resolve) => {
        attachment.wake = resolve
      })
      attachment.wake = undefined
    }
  }

  /** Ends the process (the agent is closing). */
  end(): void {
    this.kill('SIGKILL')
  }

  private detach(attachment: Attachment): void {
    if (attachment.done) return
    attachment.done = true
    attachment.wake?.()
    if (this.attachment !== attachment) return
    this.attachment = undefined
    // Nobody reads now: the pipes must flow into the held output, whatever is queued.
    this.resumePipes()
    this.trim()
    if (this.exit) this.registry.ended(this)
  }

  private push(channel: OutputChannel, data: Buffer): void {
    this.queue.push({ channel, data })
    this.queuedBytes += data.byteLength
    this.registry.held(data.byteLength)
    const attachment = this.attachment
    if (attachment) {
      attachment.wake?.()
      if (this.queuedBytes > ATTACHED_HIGH_WATER_BYTES && !this.paused) {
        this.paused = true
        this.start.child.stdout.pause()
        this.start.child.stderr.pause()
      }
      return
    }
    this.trim()
  }

  /** Drops the oldest held bytes past this process's bound, or past the agent's total. */
  private trim(): void {
    while (
      this.queuedBytes > KEPT_OUTPUT_BYTES ||
      (this.queuedBytes > 0 && this.registry.heldTotal > KEPT_OUTPUT_TOTAL_BYTES)
    ) {
      const first = this.queue[0]!
      const over = Math.max(
        this.queuedBytes - KEPT_OUTPUT_BYTES,
        this.registry.heldTotal - KEPT_OUTPUT_TOTAL_BYTES,
      )
      const cut = Math.min(over, first.data.byteLength)
      if (cut === first.data.byteLength) this.queue.shift()
      else this.queue[0] = { channel: first.channel, data: first.data.subarray(cut) }
      this.queuedBytes -= cut
      this.droppedBytes += cut
      this.registry.held(-cut)
    }
  }

  private resumeIfDrained(): void {
    if (this.paused && this.queuedBytes < ATTACHED_HIGH_WATER_BYTES / 4) this.resumePipes()
  }

  private resumePipes(): void {
    if (!this.paused) return
    this.paused = false
    this.start.child.stdout.resume()
    this.start.child.stderr.resume()
  }

  private closeStdin(): void {
    if (this.stdinClosed) return
    this.stdinClosed = true
    if (this.attachment) this.acknowledge(this.attachment)
  }

  private acknowledge(attachment: Attachment): void {
    void attachment.connection
      .send({ type: 'stdin-ack', bytes: attachment.written, closed: this.stdinClosed })
      .catch(() => {})
  }

  /** Stdin and `cancel` from the attached connection; its end detaches. */
  private async control(attachment: Attachment): Promise<void> {
    const { connection } = attachment
    const stdin = this.start.child.stdin
    for (;;) {
      const frame = await connection.read()
      if (!frame || attachment.done) {
        this.detach(attachment)
        return
      }
      if (frame.kind === 'data') {
        if (frame.channel !== 'stdin') continue
        if (this.stdinClosed || !stdin) {
          this.acknowledge(attachment)
          continue
        }
        const size = frame.data.byteLength
        stdin.write(frame.data, (error) => {
          if (!error) {
            attachment.written += size
            this.acknowledge(attachment)
          }
        })
        continue
      }
      const message = parseClientMessage(frame.message)
      if (message.type === 'stdin-end') {
        if (!this.stdinClosed) stdin?.end()
      } else if (message.type === 'cancel') {
        if (message.reason === 'abort') this.aborted = true
        this.kill(message.signal)
        await connection.send({ type: 'cancel-ack' })
      }
    }
  }

  private finish(code: number | null, signal: NodeJS.Signals | null): void {
    this.timeout?.cancel()
    if (this.killTimer) clearTimeout(this.killTimer)
    this.endedAt = Date.now()
    this.exit = {
      type: 'exit',
      exitCode: code ?? (signal ? 128 + (constants.signals[signal] ?? 0) : -1),
      signal,
      timedOut: this.timedOut,
      aborted: this.aborted,
      oomKilled: endedByOomKill(this.oomBefore, {
        signal,
        timedOut: this.timedOut,
        aborted: this.aborted,
      }),
      durationMs: Math.round(performance.now() - this.started),
    }
    this.attachment?.wake?.()
    if (!this.attachment) this.registry.ended(this)
  }
}

/**
 * The agent's kept processes: listed by `list-processes`, reached by
 * `attach`, ended with the agent. Ended ones stay listed (with their exit
 * and unread output) until {@link KEPT_ENDED_PROCESSES} newer ones have ended.
 */
export class KeptProcessRegistry {
  private readonly processes = new Map<string, KeptProcess>()
  private readonly endedOrder: string[] = []
  private heldBytes = 0

  get heldTotal(): number {
    return this.heldBytes
  }

  held(bytes: number): void {
    this.heldBytes += bytes
  }

  add(start: KeptProcessStart): KeptProcess {
    const kept = new KeptProcess(start, this)
    this.processes.set(kept.id, kept)
    return kept
  }

  get(id: string): KeptProcess {
    const kept = this.processes.get(id)
    if (!kept) throw new AgentOperationError('not-found', `no process ${id} in this sandbox`)
    return kept
  }

  list(): ProcessEntryMessage[] {
    return [...this.processes.values()].map((kept) => kept.describe())
  }

  /** A process ended, or was detached after it ended. */
  ended(kept: KeptProcess): void {
    if (this.endedOrder.includes(kept.id)) return
    this.endedOrder.push(kept.id)
    while (this.endedOrder.length > KEPT_ENDED_PROCESSES) {
      const oldest = this.processes.get(this.endedOrder.shift()!)
      if (!oldest) continue
      this.held(-oldest.heldBytes)
      this.processes.delete(oldest.id)
    }
  }

  /** A connection attached: an ended process it takes the exit of is no longer only history. */
  released(kept: KeptProcess): void {
    const at = this.endedOrder.indexOf(kept.id)
    if (at >= 0) this.endedOrder.splice(at, 1)
  }

  /** Kills every process still running (the agent is ending). */
  endAll(): void {
    for (const kept of this.processes.values()) kept.end()
  }
}
