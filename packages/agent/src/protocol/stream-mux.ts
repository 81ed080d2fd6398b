import { Duplex, type Readable, type Writable } from 'node:stream'

/**
 * Many byte streams over one pair of pipes: the channel between the host and
 * an agent whose only link is a container's attached stdin and stdout. Each
 * stream behaves like a socket of its own (a Duplex with half-close), so the
 * agent protocol runs on it unchanged, one operation per stream.
 *
 * Written by hand rather than taken from a library because both ends must
 * share it and one end is the zero-dependency agent; it is small on purpose.
 *
 * Wire format, one frame after another:
 *
 *   u32 stream id | u8 type | u32 payload length | payload
 *
 * - OPEN (payload: JSON `{ kind, ... }`) starts a stream. The side that
 *   created the session (the host) uses odd ids, the other side even ids.
 * - DATA carries bytes, at most {@link MAX_DATA_PAYLOAD} per frame, and only
 *   as many as the receiver's window allows.
 * - WINDOW (payload: u32) returns that many bytes of credit to the sender,
 *   once the receiver's reader has taken them: a stream nobody reads stalls
 *   alone, without holding up the others or growing without bound.
 * - END is a half-close: no more bytes this way.
 * - RESET ends a stream at once, both ways.
 */

const TYPE_OPEN = 1
const TYPE_DATA = 2
const TYPE_WINDOW = 3
const TYPE_END = 4
const TYPE_RESET = 5

const HEADER_BYTES = 9
/** Largest DATA payload. */
export const MAX_DATA_PAYLOAD = 64 * 1024
/** Largest payload of any frame; OPEN metadata is small, so anything larger is a broken peer. */
const MAX_FRAME_PAYLOAD = MAX_DATA_PAYLOAD
/** Bytes a sender may have in flight on one stream before the receiver returns credit. */
export const STREAM_WINDOW_BYTES = 512 * 1024
/** Credit is returned once this much has been consumed: fewer, larger credit frames. */
const CREDIT_STEP_BYTES = STREAM_WINDOW_BYTES / 4

/** What the side that opened a stream said about it. */
export interface StreamOpening {
  readonly kind: string
  readonly [field: string]: unknown
}

export class MuxProtocolError extends Error {
  constructor(message: string) {
    super(message)
    this.name = 'MuxProtocolError'
  }
}

export class MuxStreamResetError extends Error {
  constructor(message = 'the stream was reset by the peer') {
    super(message)
    this.name = 'MuxStreamResetError'
  }
}

export interface StreamMuxOptions {
  /** True for the side that starts the session (odd stream ids). */
  readonly initiator: boolean
  /** Called for each stream the peer opens. Without it, every peer stream is reset. */
  readonly onStream?: (stream: MuxStream, opening: StreamOpening) => void
  /** Streams open at once; the peer's next OPEN beyond this is reset (default 1024). */
  readonly maxStreams?: number
}

/** One stream of a {@link StreamMux}: a Duplex with half-close and per-stream flow control. */
export class MuxStream extends Duplex {
  /** Bytes the peer has granted us to send. */
  private sendCredit = STREAM_WINDOW_BYTES
  /** Bytes received and handed to our reader since credit was last returned. */
  private unacknowledged = 0
  private pendingWrite: { chunk: Buffer; callback: (error?: Error | null) => void } | undefined
  private localEnded = false
  private remoteEnded = false
  private reset = false

  constructor(
    private readonly mux: StreamMux,
    readonly id: number,
  ) {
    super({ allowHalfOpen: true, highWaterMark: MAX_DATA_PAYLOAD })
  }

  override _write(
    chunk: Buffer,
    _encoding: BufferEncoding,
    callback: (error?: Error | null) => void,
  ): void {
    this.pendingWrite = { chunk, callback }
    this.flushWrite()
  }

  /**
   * Writes that queued up while an earlier one waited (for credit, or for
   * the channel) go out together: one copy into one payload instead of a
   * frame, and a write through the engine's attach, per small write. A batch
   * of small files is thousands of small writes.
   */
  override _writev(
    chunks: Array<{ chunk: Buffer; encoding: BufferEncoding }>,
    callback: (error?: Error | null) => void,
  ): void {
    const chunk =
      chunks.length === 1 ? chunks[0]!.chunk : Buffer.concat(chunks.map((item) => item.chunk))
    this._write(chunk, chunks[0]!.encoding, callback)
  }

  override _final(callback: (error?: Error | null) => void): void {
    if (!this.reset && !this.localEnded) {
      this.localEnded = true
      this.mux.sendFrame(this.id, TYPE_END)
    }
    this.settleIfDone()
    callback()
  }

  override _read(): void {
    // Our reader wants more: return the credit for what it has taken, in
    // steps of a quarter window so credit frames stay few.
    if (this.unacknowledged >= CREDIT_STEP_BYTES && !this.reset && !this.remoteEnded) {
      const credit = Buffer.allocUnsafe(4)
      credit.writeUInt32BE(this.unacknowledged)
      this.unacknowledged = 0
      this.mux.sendFrame(this.id, TYPE_WINDOW, credit)
    }
  }

  override _destroy(error: Error | null, callback: (error?: Error | null) => void): void {
    if (!this.reset && !(this.localEnded && this.remoteEnded)) {
      this.reset = true
      this.mux.sendFrame(this.id, TYPE_RESET)
    }
    this.pendingWrite?.callback(error ?? new MuxStreamResetError('the stream was destroyed'))
    this.pendingWrite = undefined
    this.mux.forget(this.id)
    callback(error)
  }

  /** Sends as much of the pending write as credit and the channel allow. */
  flushWrite(): void {
    const pending = this.pendingWrite
    if (!pending || this.reset) return
    while (pending.chunk.byteLength > 0 && this.sendCredit > 0 && this.mux.canSend()) {
      const size = Math.min(pending.chunk.byteLength, this.sendCredit, MAX_DATA_PAYLOAD)
      this.mux.sendFrame(this.id, TYPE_DATA, pending.chunk.subarray(0, size))
      pending.chunk = pending.chunk.subarray(size)
      this.sendCredit -= size
    }
    if (pending.chunk.byteLength === 0) {
      this.pendingWrite = undefined
      pending.callback()
    }
  }

  /** Frames from the peer for this stream. */
  receive(type: number, payload: Buffer): void {
    switch (type) {
      case TYPE_DATA:
        if (this.remoteEnded) throw new MuxProtocolError(`data after end on stream ${this.id}`)
        this.unacknowledged += payload.byteLength
        this.push(payload)
        return
      case TYPE_WINDOW:
        if (payload.byteLength !== 4) throw new MuxProtocolError('malformed window frame')
        this.sendCredit += payload.readUInt32BE(0)
        this.flushWrite()
        return
      case TYPE_END:
        if (!this.remoteEnded) {
          this.remoteEnded = true
          this.push(null)
          this.settleIfDone()
        }
        return
      case TYPE_RESET:
        this.reset = true
        this.destroy(new MuxStreamResetError())
        return
      default:
        throw new MuxProtocolError(`unknown frame type ${type}`)
    }
  }

  private settleIfDone(): void {
    if (this.localEnded && this.remoteEnded) this.mux.forget(this.id)
  }
}

/** Kept on a released session's pipes: see `release()`. */
function ignoreErrorAfterRelease(): void {}

/**
 * A session of streams over `input` (frames from the peer) and `output`
 * (frames to it). The session ends when `input` ends or fails, or on
 * `close()`; every open stream is then destroyed.
 */
export class StreamMux {
  private readonly streams = new Map<number, MuxStream>()
  private nextId: number
  private buffered: Buffer = Buffer.alloc(0)
  private outputBlocked = false
  private closedWith: Error | undefined
  private readonly closeListeners: Array<(error: Error) => void> = []
  private readonly maxStreams: number

  constructor(
    input: Readable,
    private readonly output: Writable,
    private readonly options: StreamMuxOptions,
  ) {
    this.nextId = options.initiator ? 1 : 2
    this.maxStreams = options.maxStreams ?? 1024
    const onData = (chunk: Buffer): void => this.onData(chunk)
    const onEnd = (): void => this.close(new MuxProtocolError('the channel ended'))
    const onError = (error: Error): void => this.close(error)
    const onDrain = (): void => {
      this.outputBlocked = false
      for (const stream of [...this.streams.values()]) stream.flushWrite()
    }
    input.on('data', onData)
    // An input handed over paused (after a first line was read from it) must flow.
    input.resume()
    input.on('end', onEnd)
    input.on('error', onError)
    output.on('error', onError)
    output.on('drain', onDrain)
    this.detach = () => {
      input.off('data', onData)
      input.off('end', onEnd)
      input.off('error', onError)
      output.off('error', onError)
      output.off('drain', onDrain)
      // A write made just before the release can fail after it (Node emits a
      // write's EPIPE on the next tick, by when the session has let go): with
      // no listener left, that error would crash the process. The pipes'
      // next owner listens for its own errors; this one only keeps a
      // failure the session already caused from being thrown.
      for (const pipe of [input, output])
        if (!pipe.listeners('error').includes(ignoreErrorAfterRelease))
          pipe.on('error', ignoreErrorAfterRelease)
      input.pause()
    }
  }

  private readonly detach: () => void

  /**
   * Ends the session without ending the pipes: every stream is dropped
   * (nothing more is written, not even a reset), `input` is left paused at
   * the byte after the last frame read, and the close listeners are not
   * told (the session did not fail; its owner chose to leave it). What
   * comes next on the pipes is the owner's to read: a resume line, then a
   * new session.
   */
  release(): void {
    if (this.closedWith) return
    this.closedWith = new MuxProtocolError('the session was released')
    this.detach()
    for (const stream of [...this.streams.values()]) stream.destroy()
    this.streams.clear()
  }

  /** Number of streams open now. */
  get size(): number {
    return this.streams.size
  }

  get isClosed(): boolean {
    return this.closedWith !== undefined
  }

  /** Opens a stream to the peer. */
  open(opening: StreamOpening): MuxStream {
    if (this.closedWith) throw this.closedWith
    const id = this.nextId
    this.nextId += 2
    const stream = new MuxStream(this, id)
    this.streams.set(id, stream)
    this.sendFrame(id, TYPE_OPEN, Buffer.from(JSON.stringify(opening)))
    return stream
  }

  /**
   * Called once when the session ends, with the reason. Returns what takes
   * the listener back: a caller that stops waiting (a timer ran out) must not
   * leave its closure held for the life of the session.
   */
  onClose(listener: (error: Error) => void): () => void {
    if (this.closedWith) {
      listener(this.closedWith)
      return () => {}
    }
    this.closeListeners.push(listener)
    return () => {
      const at = this.closeListeners.indexOf(listener)
      if (at >= 0) this.closeListeners.splice(at, 1)
    }
  }

  /** Ends the session and every stream in it. */
  close(error: Error = new MuxProtocolError('the session was closed')): void {
    if (this.closedWith) return
    this.closedWith = error
    // A stream nobody listens to for errors ends quietly (its 'close' comes
    // without an 'end'): the end of a session must not crash the process.
    for (const stream of [...this.streams.values()])
      stream.destroy(stream.listenerCount('error') > 0 ? error : undefined)
    this.streams.clear()
    for (const listener of this.closeListeners.splice(0)) listener(error)
  }

  /** @internal */
  canSend(): boolean {
    return !this.outputBlocked && !this.closedWith
  }

  /** @internal */
  sendFrame(id: number, type: number, payload: Buffer = EMPTY): void {
    if (this.closedWith) return
    const header = Buffer.allocUnsafe(HEADER_BYTES)
    header.writeUInt32BE(id, 0)
    header.writeUInt8(type, 4)
    header.writeUInt32BE(payload.byteLength, 5)
    if (payload.byteLength === 0) {
      if (!this.output.write(header)) this.outputBlocked = true
      return
    }
    // Header and payload go out in one writev, without copying the payload.
    this.output.cork()
    this.output.write(header)
    const ok = this.output.write(payload)
    process.nextTick(() => this.output.uncork())
    if (!ok) this.outputBlocked = true
  }

  /** @internal */
  forget(id: number): void {
    this.streams.delete(id)
  }

  private onData(chunk: Buffer): void {
    if (this.closedWith) return
    this.buffered = this.buffered.byteLength === 0 ? chunk : Buffer.concat([this.buffered, chunk])
    try {
      while (this.buffered.byteLength >= HEADER_BYTES) {
        const length = this.buffered.readUInt32BE(5)
        if (length > MAX_FRAME_PAYLOAD) {
          throw new MuxProtocolError(`frame of ${length} bytes is over the limit`)
        }
        if (this.buffered.byteLength < HEADER_BYTES + length) break
        const id = this.buffered.readUInt32BE(0)
        const type = this.buffered.readUInt8(4)
        const payload = this.buffered.subarray(HEADER_BYTES, HEADER_BYTES + length)
        this.buffered = this.buffered.subarray(HEADER_BYTES + length)
        // Data is handed on as a view (its buffer is at most one read's worth);
        // the rest is copied so a small frame does not pin a large buffer.
        this.dispatch(id, type, type === TYPE_DATA ? payload : Buffer.from(payload))
      }
    } catch (error) {
      this.close(error as Error)
    }
  }

  private dispatch(id: number, type: number, payload: Buffer): void {
    if (type === TYPE_OPEN) {
      const fromPeer = this.options.initiator ? id % 2 === 0 : id % 2 === 1
      if (!fromPeer || id === 0 || this.streams.has(id)) {
        throw new MuxProtocolError(`the peer opened stream ${id}, which is not its to open`)
      }
      let opening: StreamOpening
      try {
        opening = JSON.parse(payload.toString('utf8'))
      } catch {
        throw new MuxProtocolError('malformed open frame')
      }
      if (typeof opening?.kind !== 'string')
        throw new MuxProtocolError('an open frame needs a kind')
      const stream = new MuxStream(this, id)
      this.streams.set(id, stream)
      if (!this.options.onStream || this.streams.size > this.maxStreams) {
        stream.destroy()
        return
      }
      this.options.onStream(stream, opening)
      return
    }
    const stream = this.streams.get(id)
    // Frames for a stream already gone (reset, or destroyed here) are dropped.
    if (!stream) return
    stream.receive(type, payload)
  }
}

const EMPTY = Buffer.alloc(0)

/**
 * Joins two byte streams both ways, half-closes included (one side ending its
 * writes ends the other's, while the answer still flows back); either one
 * failing ends both.
 */
export function pipeBothWays(a: Duplex, b: Duplex): void {
  a.pipe(b)
  b.pipe(a)
  const stop = (): void => {
    a.destroy()
    b.destroy()
  }
  a.on('error', stop)
  b.on('error', stop)
  // One side gone for good takes the other with it: at once if it went
  // without ending (a reset), else once what it sent has been written.
  const follow = (other: Duplex) => () => {
    if (other.destroyed) return
    if (!other.writableEnded) other.destroy()
    else if (other.writableFinished) other.destroy()
    else other.once('finish', () => other.destroy())
  }
  a.on('close', follow(b))
  b.on('close', follow(a))
}
