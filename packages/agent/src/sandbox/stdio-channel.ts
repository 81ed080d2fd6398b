import type { Readable, Writable } from 'node:stream'
import { type MuxStream, StreamMux, type StreamOpening } from '../protocol/index.js'

/**
 * The host's end of an agent that serves its stdin and stdout
 * (`CORDON_AGENT_LISTEN=stdio`): a stream multiplexer over the two pipes,
 * whatever carries them (a Docker container's attach, a local child
 * process's pipes). Every command, file and port-forward stream is a stream
 * on it; the agent opens streams back for the sandbox's egress connections.
 *
 * The pipes keep the host process alive only while a stream is open (a
 * spare connection waiting for the next operation does not count), so a
 * host that has finished its work can exit with sandboxes still up; their
 * agents then see their stdin end, and end too.
 */
export interface StdioChannelOptions {
  /** What the agent writes: the multiplexer's input. */
  readonly fromAgent: Readable
  /** What the agent reads. */
  readonly toAgent: Writable
  /**
   * What keeps the host process alive while streams are open (a socket or a
   * child process); `ref()` while there is work, `unref()` when there is none.
   */
  readonly keepAlive?: { ref?(): unknown; unref?(): unknown }
  /** The agent's log (its stderr), if the carrier separates it; the last few KiB are kept. */
  readonly agentLog?: Readable
  /** Streams the agent opens (egress connections), with what it asked for. */
  readonly onStream?: (stream: MuxStream, opening: StreamOpening) => void
  /** Ends the carrier when the channel is closed (destroy a socket, close a child's stdin). */
  readonly closeCarrier: () => void
}

const LOG_TAIL_CHARS = 4_000

export class StdioChannel {
  readonly mux: StreamMux
  private logTail = ''
  /** Streams open now, and those of them that wait as spare connections (not work). */
  private openStreams = 0
  private readonly spares = new WeakSet<object>()
  private spareCount = 0
  /** Whether `keepAlive` was last told `ref()` (true) or `unref()` (false); `undefined` before the first. */
  private held: boolean | undefined

  constructor(private readonly options: StdioChannelOptions) {
    this.mux = new StreamMux(options.fromAgent, options.toAgent, {
      initiator: true,
      ...(options.onStream
        ? {
            onStream: (stream: MuxStream, opening: StreamOpening) => {
              this.track(stream)
              options.onStream!(stream, opening)
            },
          }
        : {}),
    })
    options.agentLog?.on('data', (chunk: Buffer) => {
      this.logTail = (this.logTail + chunk.toString('utf8')).slice(-LOG_TAIL_CHARS)
    })
    this.refresh()
  }

  /**
   * Writes bytes ahead of the multiplexer's first frame: the agent's secret
   * line, which the agent reads from stdin before it starts its end of the
   * multiplexer (an environment variable would be readable in
   * `/proc/<pid>/environ` under some runtimes). Call once, before any stream
   * is opened.
   */
  sendPreface(bytes: string): void {
    this.options.toAgent.write(bytes)
  }

  /** Opens a stream to the agent. */
  open(opening: StreamOpening): MuxStream {
    const stream = this.mux.open(opening)
    this.track(stream)
    return stream
  }

  /** A stream waiting as a spare connection does not keep the host process alive. */
  setSpare(stream: object, spare: boolean): void {
    if (spare === this.spares.has(stream)) return
    if (spare) this.spares.add(stream)
    else this.spares.delete(stream)
    this.spareCount += spare ? 1 : -1
    this.refresh()
  }

  /** The last few kilobytes of the agent's log, for diagnostics. */
  get log(): string {
    return this.logTail
  }

  get isClosed(): boolean {
    return this.mux.isClosed
  }

  /**
   * Calls `listener` once when the channel ends (the agent stopped, or its
   * carrier went away); returns what takes it back.
   */
  onClose(listener: (error: Error) => void): () => void {
    return this.mux.onClose(listener)
  }

  /** Ends the channel: the agent's stdin closes and it stops. */
  close(): void {
    this.mux.close()
    // Let go of the carrier while it is still open: its streams close after it is gone.
    this.refresh()
    this.options.closeCarrier()
  }

  private track(stream: MuxStream): void {
    this.openStreams++
    this.refresh()
    stream.once('close', () => {
      this.openStreams--
      this.setSpare(stream, false)
      this.refresh()
    })
  }

  /**
   * Tells `keepAlive` only what changed, and once the session is over only
   * `unref()`, once: its streams then close in a burst, by when the carrier
   * may be destroyed, and a destroyed `net.Socket` answers every `ref()` or
   * `unref()` with a `connect` listener that never fires (Node defers the
   * call to a connection that will never come). One sandbox's channel ended
   * with hundreds of egress tunnels open would leave hundreds on its socket.
   */
  private refresh(): void {
    const hold = !this.mux.isClosed && this.openStreams - this.spareCount > 0
    if (hold === this.held) return
    this.held = hold
    if (hold) this.options.keepAlive?.ref?.()
    else this.options.keepAlive?.unref?.()
  }
}
