/**
 * Framing of the agent protocol.
 *
 * A frame is a 4-byte big-endian length, then that many bytes of body. The
 * body's first byte says what it carries:
 *
 * - `0x01` message: the rest is one UTF-8 JSON object with a string `type`.
 * - `0x02` data: the next byte names a channel (stdin, stdout, stderr, file),
 *   the rest is raw bytes. File contents and command output travel as they
 *   are, with five bytes of overhead per frame instead of base64's third.
 *
 * The decoder refuses a length above its limit as soon as the header arrives,
 * so a peer can never make it buffer more than one maximal frame.
 */

export const FRAME_HEADER_BYTES = 4
export const FRAME_KIND_MESSAGE = 0x01
export const FRAME_KIND_DATA = 0x02

/** Largest body accepted after authentication: a 64 KiB data chunk plus generous room for JSON. */
export const DEFAULT_MAX_FRAME_BYTES = 1024 * 1024
/** Largest body accepted before the peer has authenticated. */
export const PRE_AUTH_MAX_FRAME_BYTES = 4096
/** Size of the data chunks senders cut files and output into. */
export const DATA_CHUNK_BYTES = 64 * 1024

export const DATA_CHANNELS = { stdin: 0, stdout: 1, stderr: 2, file: 3 } as const
export type DataChannel = keyof typeof DATA_CHANNELS
const CHANNEL_BY_NUMBER: readonly DataChannel[] = ['stdin', 'stdout', 'stderr', 'file']

export type Frame =
  | {
      readonly kind: 'message'
      readonly message: { readonly type: string } & Record<string, unknown>
    }
  | { readonly kind: 'data'; readonly channel: DataChannel; readonly data: Uint8Array }

export type FrameErrorReason =
  | 'empty'
  | 'too-large'
  | 'unknown-kind'
  | 'bad-channel'
  | 'bad-json'
  | 'truncated'

/** The byte stream is not valid framing; the connection cannot continue. */
export class FrameError extends Error {
  readonly reason: FrameErrorReason

  constructor(reason: FrameErrorReason, message: string) {
    super(message)
    this.name = 'FrameError'
    this.reason = reason
  }
}

const textEncoder = new TextEncoder()
const textDecoder = new TextDecoder('utf-8', { fatal: true })

/** Encodes one JSON message frame. */
export function encodeMessageFrame(message: { readonly type: string }): Uint8Array {
  const json = textEncoder.encode(JSON.stringify(message))
  const frame = new Uint8Array(FRAME_HEADER_BYTES + 1 + json.byteLength)
  const view = new DataView(frame.buffer)
  view.setUint32(0, 1 + json.byteLength)
  frame[FRAME_HEADER_BYTES] = FRAME_KIND_MESSAGE
  frame.set(json, FRAME_HEADER_BYTES + 1)
  return frame
}

/** Encodes the header of a data frame; send it followed by `dataLength` bytes. */
export function encodeDataHeader(channel: DataChannel, dataLength: number): Uint8Array {
  const header = new Uint8Array(FRAME_HEADER_BYTES + 2)
  new DataView(header.buffer).setUint32(0, 2 + dataLength)
  header[FRAME_HEADER_BYTES] = FRAME_KIND_DATA
  header[FRAME_HEADER_BYTES + 1] = DATA_CHANNELS[channel]
  return header
}

/** Encodes one whole data frame (header and bytes in one buffer). */
export function encodeDataFrame(channel: DataChannel, data: Uint8Array): Uint8Array {
  const header = encodeDataHeader(channel, data.byteLength)
  const frame = new Uint8Array(header.byteLength + data.byteLength)
  frame.set(header)
  frame.set(data, header.byteLength)
  return frame
}

/**
 * Turns a byte stream, cut anywhere, back into frames. Feed it with `push`;
 * call `end` when the stream ends to detect a frame cut short. After the first
 * error the decoder stays failed: framing cannot be resynchronised.
 */
export class FrameDecoder {
  private pending: Uint8Array[] = []
  private pendingBytes = 0
  private failure: FrameError | undefined
  maxFrameBytes: number

  constructor(options: { maxFrameBytes?: number } = {}) {
    this.maxFrameBytes = options.maxFrameBytes ?? DEFAULT_MAX_FRAME_BYTES
  }

  /** Bytes received but not yet part of a complete frame. */
  get bufferedBytes(): number {
    return this.pendingBytes
  }

  /**
   * Adds `chunk` and returns the frames it completes. With `stopAfter`, stops
   * at the first frame it accepts: what follows stays buffered, unparsed, for
   * {@link takeRemaining} (bytes of another protocol that take over the stream).
   */
  push(chunk: Uint8Array, stopAfter?: (frame: Frame) => boolean): Frame[] {
    if (this.failure) throw this.failure
    if (chunk.byteLength > 0) {
      this.pending.push(chunk)
      this.pendingBytes += chunk.byteLength
    }
    const frames: Frame[] = []
    try {
      for (;;) {
        const frame = this.next()
        if (!frame) break
        frames.push(frame)
        if (stopAfter?.(frame)) break
      }
    } catch (error) {
      this.failure = error as FrameError
      this.pending = []
      this.pendingBytes = 0
      throw error
    }
    return frames
  }

  /** The bytes buffered past the last frame returned, which this decoder then forgets. */
  takeRemaining(): Buffer {
    const remaining = Buffer.concat(this.pending)
    this.pending = []
    this.pendingBytes = 0
    return remaining
  }

  /** Throws if the stream ended in the middle of a frame. */
  end(): void {
    if (this.failure) throw this.failure
    if (this.pendingBytes > 0) {
      this.failure = new FrameError(
        'truncated',
        `stream ended inside a frame (${this.pendingBytes} bytes pending)`,
      )
      throw this.failure
    }
  }

  private next(): Frame | undefined {
    if (this.pendingBytes < FRAME_HEADER_BYTES) return undefined
    const header = this.peek(FRAME_HEADER_BYTES)
    const length = new DataView(header.buffer, header.byteOffset, FRAME_HEADER_BYTES).getUint32(0)
    if (length === 0) throw new FrameError('empty', 'frame with an empty body')
    if (length > this.maxFrameBytes) {
      throw new FrameError(
        'too-large',
        `frame of ${length} bytes exceeds the limit of ${this.maxFrameBytes}`,
      )
    }
    if (this.pendingBytes < FRAME_HEADER_BYTES + length) return undefined
    this.take(FRAME_HEADER_BYTES)
    return parseBody(this.take(length))
  }

  /** The first `count` buffered bytes, without consuming them. */
  private peek(count: number): Uint8Array {
    const first = this.pending[0]!
    if (first.byteLength >= count) return first.subarray(0, count)
    const out = new Uint8Array(count)
    let offset = 0
    for (const chunk of this.pending) {
      const part = chunk.subarray(0, count - offset)
      out.set(part, offset)
      offset += part.byteLength
      if (offset === count) break
    }
    return out
  }

  private take(count: number): Uint8Array {
    const first = this.pending[0]!
    if (first.byteLength >= count) {
      const out = first.subarray(0, count)
      if (first.byteLength === count) this.pending.shift()
      else this.pending[0] = first.subarray(count)
      this.pendingBytes -= count
      return out
    }
    const out = new Uint8Array(count)
    let offset = 0
    while (offset < count) {
      const chunk = this.pending[0]!
      const need = count - offset
      if (chunk.byteLength <= need) {
        out.set(chunk, offset)
        offset += chunk.byteLength
        this.pending.shift()
      } else {
        out.set(chunk.subarray(0, need), offset)
        this.pending[0] = chunk.subarray(need)
        offset += need
      }
    }
    this.pendingBytes -= count
    return out
  }
}

function parseBody(body: Uint8Array): Frame {
  const kind = body[0]
  if (kind === FRAME_KIND_MESSAGE) {
    let parsed: unknown
    try {
      parsed = JSON.parse(textDecoder.decode(body.subarray(1)))
    } catch {
      throw new FrameError('bad-json', 'message frame is not valid UTF-8 JSON')
    }
    if (typeof parsed !== 'object' || parsed === null || Array.isArray(parsed)) {
      throw new FrameError('bad-json', 'message frame is not a JSON object')
    }
    if (typeof (parsed as { type?: unknown }).type !== 'string') {
      throw new FrameError('bad-json', 'message frame has no string "type"')
    }
    return { kind: 'message', message: parsed as { type: string } & Record<string, unknown> }
  }
  if (kind === FRAME_KIND_DATA) {
    if (body.byteLength < 2)
      throw new FrameError('bad-channel', 'data frame without a channel byte')
    const channel = CHANNEL_BY_NUMBER[body[1]!]
    if (!channel) throw new FrameError('bad-channel', `unknown data channel ${body[1]}`)
    // Copy so the frame does not pin the (possibly much larger) socket buffer.
    return { kind: 'data', channel, data: body.slice(2) }
  }
  throw new FrameError(
    'unknown-kind',
    `unknown frame kind 0x${(kind ?? 0).toString(16).padStart(2, '0')}`,
  )
}
