import { Socket } from 'node:net'
import type { Duplex } from 'node:stream'
import {
  DATA_CHUNK_BYTES,
  type DataChannel,
  encodeDataHeader,
  encodeMessageFrame,
  type Frame,
  FrameDecoder,
  PRE_AUTH_MAX_FRAME_BYTES,
} from './frame-codec.js'
import type { AgentMessage, ClientMessage } from './messages.js'

/** The peer went quiet for longer than the idle budget while we were listening. */
export class ConnectionIdleError extends Error {
  constructor(idleMs: number) {
    super(`no data from the peer for ${idleMs} ms`)
    this.name = 'ConnectionIdleError'
  }
}

/** The connection closed before the operation finished. */
export class ConnectionClosedError extends Error {
  constructor(message = 'connection closed', options?: { cause?: unknown }) {
    super(message, options)
    this.name = 'ConnectionClosedError'
  }
}

export interface FramedConnectionOptions {
  /** Frame size limit until {@link FramedConnection.setMaxFrameBytes} raises it. */
  readonly maxFrameBytes?: number
  /** Frames buffered before reading from the socket pauses (default 16, about 1 MiB of data). */
  readonly highWaterFrames?: number
}

/**
 * Both ends of the protocol speak through this: it turns a byte stream into a
 * pull-based queue of frames with backpressure in both directions, and keeps a
 * quiet connection alive with heartbeats.
 *
 * Heartbeats are consumed here and never reach `read()`. Silence is judged only
 * while this side is actually listening: a reader that paused the socket
 * because its consumer is slow does not mistake its own pause for a dead peer,
 * a side whose own process did not run for a while (frozen with its sandbox,
 * or starved) does not hold that time against the peer, and a host that has
 * frozen the peer's sandbox holds the judgement ({@link holdIdle}).
 */
export class FramedConnection {
  private readonly decoder: FrameDecoder
  private readonly queue: Frame[] = []
  private readonly highWater: number
  private waiter:
    | { resolve: (frame: Frame | undefined) => void; reject: (error: unknown) => void }
    | undefined
  private ended = false
  private failure: unknown
  private pausedForBackpressure = false
  private lastReceivedAt = Date.now()
  private lastSentAt = Date.now()
  private lastTickAt = Date.now()
  private idleHeld = false
  private heartbeatTimer: ReturnType<typeof setInterval> | undefined
  private drainWaiters: Array<{ resolve: () => void; reject: (error: unknown) => void }> = []
  private closeListeners: Array<(error: unknown) => void> = []

  constructor(
    readonly socket: Duplex,
    options: FramedConnectionOptions = {},
  ) {
    this.decoder = new FrameDecoder({
      maxFrameBytes: options.maxFrameBytes ?? PRE_AUTH_MAX_FRAME_BYTES,
    })
    this.highWater = options.highWaterFrames ?? 16
    const onData = (chunk: Buffer): void => this.onData(chunk)
    const onEnd = (): void => this.onEnd()
    const onError = (error: Error): void => this.fail(error)
    const onClose = (): void => this.fail(new ConnectionClosedError())
    const onDrain = (): void => this.settleDrain()
    socket.on('data', onData)
    socket.on('end', onEnd)
    socket.on('error', onError)
    socket.on('close', onClose)
    socket.on('drain', onDrain)
    this.detach = () => {
      socket.off('data', onData)
      socket.off('end', onEnd)
      socket.off('error', onError)
      socket.off('close', onClose)
      socket.off('drain', onDrain)
      socket.pause()
    }
    // A socket handed over paused (e.g. after a vsock handshake) must flow again.
    socket.resume()
  }

  private readonly detach: () => void
  /** Set by {@link readAndRelease}: the frame after which the socket is let go of. */
  private releaseAfterNext = false

  /** True once the connection has failed or been closed. */
  get isClosed(): boolean {
    return this.failure !== undefined
  }

  /** Raises (or lowers) the frame size limit, e.g. once the peer has authenticated. */
  setMaxFrameBytes(limit: number): void {
    this.decoder.maxFrameBytes = limit
  }

  /** Called once when the connection fails or closes, with the reason. */
  onClose(listener: (error: unknown) => void): void {
    if (this.failure !== undefined) listener(this.failure)
    else this.closeListeners.push(listener)
  }

  /**
   * The next frame, `undefined` when the peer ended the stream cleanly, or a
   * rejection when the framing broke, the socket failed or the peer went idle.
   */
  read(): Promise<Frame | undefined> {
    const frame = this.queue.shift()
    if (frame) {
      this.maybeResume()
      return Promise.resolve(frame)
    }
    if (this.ended) return Promise.resolve(undefined)
    if (this.failure !== undefined) return Promise.reject(this.failure)
    if (this.waiter) return Promise.reject(new Error('FramedConnection.read() called concurrently'))
    this.maybeResume()
    return new Promise((resolve, reject) => {
      this.waiter = { resolve, reject }
    })
  }

  /**
   * Lets go of the socket: this connection reads and writes nothing more on
   * it (no heartbeats either) and counts as closed, and the socket is left
   * paused with whatever arrived past the last frame read put back into it,
   * for another protocol to take over (the agent's session multiplexer after
   * `adopt-session`). Frames decoded but not yet read would be lost: then it throws.
   */
  release(): void {
    if (this.queue.length > 0)
      throw new Error('FramedConnection.release() with frames not yet read')
    this.stopHeartbeat()
    this.detach()
    const remaining = this.decoder.takeRemaining()
    if (remaining.byteLength > 0) this.socket.unshift(remaining)
    this.fail(new ConnectionClosedError('the connection was handed over'))
  }

  /**
   * Reads the next frame (heartbeats aside) and then {@link release}s the
   * socket, decoding nothing past that frame: the peer's bytes that follow it
   * (another protocol's) stay in the socket. For the last frame before a
   * hand-over.
   */
  async readAndRelease(): Promise<Frame | undefined> {
    if (this.queue.length > 0)
      throw new Error('FramedConnection.readAndRelease() with frames already decoded')
    this.releaseAfterNext = true
    try {
      const frame = await this.read()
      if (frame) this.release()
      return frame
    } finally {
      this.releaseAfterNext = false
    }
  }

  /**
   * The data frames of `channel` already decoded and next in line, taken
   * without waiting, up to `maxBytes` in all; none if the next frame is of
   * another kind or channel. A reader slower than the peer finds several
   * there and can hand them on as one piece.
   */
  takeQueuedData(channel: DataChannel, maxBytes: number): Uint8Array[] {
    const taken: Uint8Array[] = []
    let bytes = 0
    for (;;) {
      const next = this.queue[0]
      if (next?.kind !== 'data' || next.channel !== channel) break
      if (bytes + next.data.byteLength > maxBytes) break
      this.queue.shift()
      taken.push(next.data)
      bytes += next.data.byteLength
    }
    if (taken.length > 0) this.maybeResume()
    return taken
  }

  /** Sends one message; resolves when the socket can take more. */
  send(message: AgentMessage | ClientMessage): Promise<void> {
    return this.write(encodeMessageFrame(message))
  }

  /**
   * Sends bytes on a data channel, cut into frames of at most
   * {@link DATA_CHUNK_BYTES}. The frames of one call leave in one gathered
   * write (the socket is corked while they are queued), not two system calls
   * a frame, header then payload: under gVisor every system call is a round
   * trip through its kernel, and a 100 MiB download made 3,400 of them.
   * Memory stays the caller's: the bytes are referenced, not copied, and the
   * call resolves once the socket can take more.
   */
  async sendData(channel: DataChannel, data: Uint8Array): Promise<void> {
    if (data.byteLength === 0) return
    if (this.failure !== undefined) throw this.failure
    await this.gather(() => {
      const written: Array<Promise<void>> = []
      for (let offset = 0; offset < data.byteLength; offset += DATA_CHUNK_BYTES) {
        const part = data.subarray(offset, offset + DATA_CHUNK_BYTES)
        this.socket.write(encodeDataHeader(channel, part.byteLength))
        written.push(this.write(part))
      }
      return written
    })
  }

  /**
   * Runs `queue`, which starts sends without awaiting them, with the socket
   * corked: what it queues leaves in one gathered write, not a system call
   * per message (a batch of small files is two messages a file). Resolves
   * once every send has; the caller bounds what it queues.
   */
  async gather(queue: () => Array<Promise<void>>): Promise<void> {
    let sent: Array<Promise<void>>
    this.socket.cork()
    try {
      sent = queue()
    } finally {
      this.socket.uncork()
    }
    await Promise.all(sent)
  }

  /**
   * True when everything written so far has been handed to the operating
   * system, so a buffer passed to {@link sendData} is no longer referenced
   * and may be filled again. Only a socket can say so: a multiplexed stream
   * hands its bytes to another stream, which may still hold them.
   */
  get sentBuffersReleased(): boolean {
    return this.socket instanceof Socket && this.socket.writableLength === 0
  }

  /**
   * Sends a heartbeat whenever nothing was sent for `intervalMs`, and fails the
   * connection with {@link ConnectionIdleError} after `idleTimeoutMs` without
   * hearing anything while listening.
   */
  startHeartbeat(intervalMs: number, idleTimeoutMs: number): void {
    this.stopHeartbeat()
    const tick = Math.max(10, Math.floor(intervalMs / 2))
    this.lastReceivedAt = Date.now()
    this.lastTickAt = this.lastReceivedAt
    this.heartbeatTimer = setInterval(() => {
      const now = Date.now()
      // A tick this late means this process did not run meanwhile: that
      // silence was this side's, not the peer's.
      const late = now - this.lastTickAt - tick
      this.lastTickAt = now
      if (late > tick) this.lastReceivedAt = Math.min(now, this.lastReceivedAt + late)
      if (this.pausedForBackpressure || this.idleHeld) this.lastReceivedAt = now
      // Nothing is sent into a frozen peer: it would only pile up in its buffers.
      if (this.idleHeld) return
      if (now - this.lastReceivedAt > idleTimeoutMs) {
        this.destroy(new ConnectionIdleError(idleTimeoutMs))
        return
      }
      const writable = this.socket as Duplex & { writableNeedDrain?: boolean }
      if (now - this.lastSentAt >= intervalMs && !writable.writableNeedDrain) {
        void this.send({ type: 'heartbeat' }).catch(() => {})
      }
    }, tick)
    this.heartbeatTimer.unref?.()
  }

  /**
   * While held, the peer's silence is not judged and no heartbeat is sent:
   * for a host whose peer is frozen on purpose (a paused sandbox). Released,
   * the peer gets a whole idle budget from that moment.
   */
  holdIdle(held: boolean): void {
    this.idleHeld = held
    if (!held) this.lastReceivedAt = Date.now()
  }

  stopHeartbeat(): void {
    if (this.heartbeatTimer) clearInterval(this.heartbeatTimer)
    this.heartbeatTimer = undefined
  }

  /** Ends the connection after everything written so far is flushed. */
  close(): void {
    this.stopHeartbeat()
    if (!this.socket.destroyed) this.socket.end()
  }

  /** Tears the connection down at once. */
  destroy(error?: unknown): void {
    this.stopHeartbeat()
    this.fail(error ?? new ConnectionClosedError('connection destroyed'))
    this.socket.destroy()
  }

  private write(bytes: Uint8Array): Promise<void> {
    if (this.failure !== undefined) return Promise.reject(this.failure)
    // After close(): a write now would be an error on the socket, which
    // destroys it, and with it whatever the peer had not yet read (an exec's
    // exit report, when a late stdin acknowledgement came after it).
    if (this.socket.writableEnded)
      return Promise.reject(new ConnectionClosedError('connection closed for writing'))
    this.lastSentAt = Date.now()
    if (this.socket.write(bytes)) return Promise.resolve()
    return new Promise((resolve, reject) => this.drainWaiters.push({ resolve, reject }))
  }

  private settleDrain(): void {
    const waiters = this.drainWaiters
    this.drainWaiters = []
    for (const waiter of waiters) waiter.resolve()
  }

  private onData(chunk: Buffer): void {
    this.lastReceivedAt = Date.now()
    let frames: Frame[]
    try {
      frames = this.decoder.push(
        new Uint8Array(chunk.buffer, chunk.byteOffset, chunk.byteLength),
        this.releaseAfterNext ? isNotHeartbeat : undefined,
      )
    } catch (error) {
      this.destroy(error)
      return
    }
    if (this.releaseAfterNext && frames.some(isNotHeartbeat)) {
      // Let go of before the frame's reader runs: nothing more is read from the socket.
      this.releaseAfterNext = false
      const waiter = this.waiter
      this.waiter = undefined
      const frame = frames.find(isNotHeartbeat)!
      this.detach()
      if (waiter) waiter.resolve(frame)
      else this.queue.push(frame)
      return
    }
    for (const frame of frames) {
      if (frame.kind === 'message' && frame.message.type === 'heartbeat') continue
      if (this.waiter) {
        const waiter = this.waiter
        this.waiter = undefined
        waiter.resolve(frame)
      } else {
        this.queue.push(frame)
      }
    }
    if (this.queue.length >= this.highWater && !this.pausedForBackpressure) {
      this.pausedForBackpressure = true
      this.socket.pause()
    }
  }

  private onEnd(): void {
    try {
      this.decoder.end()
    } catch (error) {
      this.fail(error)
      return
    }
    this.ended = true
    if (this.waiter && this.queue.length === 0) {
      const waiter = this.waiter
      this.waiter = undefined
      waiter.resolve(undefined)
    }
  }

  private maybeResume(): void {
    if (this.pausedForBackpressure && this.queue.length < this.highWater / 2) {
      this.pausedForBackpressure = false
      this.socket.resume()
    }
  }

  private fail(error: unknown): void {
    if (this.failure !== undefined) return
    // A clean end followed by close is not a failure for readers that already saw the end.
    this.failure = error
    this.stopHeartbeat()
    if (this.waiter) {
      const waiter = this.waiter
      this.waiter = undefined
      if (this.ended && this.queue.length === 0) waiter.resolve(undefined)
      else waiter.reject(error)
    }
    const drains = this.drainWaiters
    this.drainWaiters = []
    for (const waiter of drains) waiter.reject(error)
    const listeners = this.closeListeners
    this.closeListeners = []
    for (const listener of listeners) listener(error)
  }
}

function isNotHeartbeat(frame: Frame): boolean {
  return !(frame.kind === 'message' && frame.message.type === 'heartbeat')
}
