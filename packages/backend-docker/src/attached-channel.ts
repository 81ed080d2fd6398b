import type { Socket } from 'node:net'
import { type Duplex, PassThrough } from 'node:stream'
import { type MuxStream, StreamMux, type StreamOpening } from '@cordon/agent/protocol'
import type Docker from 'dockerode'

/**
 * The host's end of a cordon container's only channel: the engine's attach to
 * the container's stdin and stdout, carrying a stream multiplexer. It needs
 * no network path between host and container and nothing the sandbox could
 * reach, works the same with a remote engine and under gVisor, and a round
 * trip over it costs about half a millisecond, against some 70 for the
 * engine's exec API.
 *
 * The container is started with `StdinOnce`: when this attach goes away,
 * because the host closed it or died, the container's stdin closes and its
 * entry process ends (the engine then removes the container). The connection
 * keeps the host process alive only while a stream is open, so a host that
 * has finished its work can exit with sandboxes still up.
 */
export class AttachedChannel {
  private stderrTail = ''
  /** Streams open now, and those of them that wait as spare connections (not work). */
  private open_ = 0
  private readonly spares = new WeakSet<object>()
  private spareCount = 0

  private constructor(
    readonly mux: StreamMux,
    private readonly socket: Duplex,
  ) {}

  /**
   * Attaches to a created, not yet started container, so nothing it writes is
   * missed. `onStream` receives the streams the container opens.
   */
  static async attach(
    container: Docker.Container,
    docker: Docker,
    onStream?: (stream: MuxStream, opening: StreamOpening) => void,
  ): Promise<AttachedChannel> {
    const socket = (await container.attach({
      stream: true,
      hijack: true,
      stdin: true,
      stdout: true,
      stderr: true,
    })) as Duplex
    const stdout = new PassThrough({ highWaterMark: 256 * 1024 })
    const stderr = new PassThrough()
    docker.modem.demuxStream(socket, stdout, stderr)
    socket.on('end', () => stdout.end())
    socket.on('close', () => stdout.end())
    let channel: AttachedChannel | undefined
    const mux = new StreamMux(stdout, socket, {
      initiator: true,
      ...(onStream
        ? {
            onStream: (stream: MuxStream, opening: StreamOpening) => {
              channel?.track(stream)
              onStream(stream, opening)
            },
          }
        : {}),
    })
    channel = new AttachedChannel(mux, socket)
    stderr.on('data', (chunk: Buffer) => {
      channel.stderrTail = (channel.stderrTail + chunk.toString('utf8')).slice(-4000)
    })
    channel.refresh()
    return channel
  }

  /**
   * Writes bytes ahead of the multiplexer's first frame: the agent's secret
   * line, which the agent reads from stdin before it starts its end of the
   * multiplexer (an environment variable would be readable in
   * `/proc/<pid>/environ` under some runtimes). Call once, before any stream
   * is opened.
   */
  sendPreface(bytes: string): void {
    this.socket.write(bytes)
  }

  /** Opens a stream to the container's agent. */
  open(opening: StreamOpening): MuxStream {
    const stream = this.mux.open(opening)
    this.track(stream)
    return stream
  }

  private track(stream: MuxStream): void {
    this.open_++
    this.refresh()
    stream.once('close', () => {
      this.open_--
      this.setSpare(stream, false)
      this.refresh()
    })
  }

  /** A stream waiting as a spare connection does not keep the host process alive. */
  setSpare(stream: object, spare: boolean): void {
    if (spare === this.spares.has(stream)) return
    if (spare) this.spares.add(stream)
    else this.spares.delete(stream)
    this.spareCount += spare ? 1 : -1
    this.refresh()
  }

  /** The last few kilobytes the container wrote to stderr (its agent's log), for diagnostics. */
  get log(): string {
    return this.stderrTail
  }

  get isClosed(): boolean {
    return this.mux.isClosed
  }

  /** Calls `listener` once when the channel ends (the container stopped, or the engine went away). */
  onClose(listener: (error: Error) => void): void {
    this.mux.onClose(listener)
  }

  /** Ends the channel: the container's stdin closes and its entry process stops. */
  close(): void {
    this.mux.close()
    this.socket.end()
    this.socket.destroy()
  }

  private refresh(): void {
    const socket = this.socket as Partial<Socket>
    if (this.open_ - this.spareCount > 0) socket.ref?.()
    else socket.unref?.()
  }
}
