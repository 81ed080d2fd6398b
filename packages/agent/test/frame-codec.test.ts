import fc from 'fast-check'
import { describe, expect, it } from 'vitest'
import {
  DATA_CHANNELS,
  type DataChannel,
  encodeDataFrame,
  encodeMessageFrame,
  type Frame,
  FrameDecoder,
  FrameError,
} from '../src/protocol/frame-codec.js'

const channels = Object.keys(DATA_CHANNELS) as DataChannel[]

const messageFrame = fc
  .record({
    type: fc.string({ minLength: 1, maxLength: 20 }),
    text: fc.string({ maxLength: 200 }),
    n: fc.integer(),
  })
  .map((message): Frame => ({ kind: 'message', message }))
const dataFrame = fc
  .record({
    channel: fc.constantFrom(...channels),
    data: fc.uint8Array({ minLength: 0, maxLength: 3000 }),
  })
  .map((frame): Frame => ({ kind: 'data', ...frame }))
const anyFrame = fc.oneof(messageFrame, dataFrame)

function encode(frame: Frame): Uint8Array {
  return frame.kind === 'message'
    ? encodeMessageFrame(frame.message)
    : encodeDataFrame(frame.channel, frame.data)
}

function concat(parts: Uint8Array[]): Uint8Array {
  const out = new Uint8Array(parts.reduce((sum, part) => sum + part.byteLength, 0))
  let offset = 0
  for (const part of parts) {
    out.set(part, offset)
    offset += part.byteLength
  }
  return out
}

/** Cuts `bytes` at the given (sorted, de-duplicated) offsets. */
function cut(bytes: Uint8Array, offsets: number[]): Uint8Array[] {
  const points = [...new Set(offsets.map((offset) => offset % (bytes.byteLength + 1)))].sort(
    (a, b) => a - b,
  )
  const pieces: Uint8Array[] = []
  let start = 0
  for (const point of [...points, bytes.byteLength]) {
    pieces.push(bytes.subarray(start, point))
    start = point
  }
  return pieces
}

function normalise(frame: Frame): unknown {
  return frame.kind === 'message'
    ? frame
    : { kind: 'data', channel: frame.channel, data: Array.from(frame.data) }
}

describe('frame codec', () => {
  it('decodes any sequence of frames, however the byte stream is cut', () => {
    fc.assert(
      fc.property(
        fc.array(anyFrame, { maxLength: 12 }),
        fc.array(fc.nat(), { maxLength: 40 }),
        (frames, offsets) => {
          const stream = concat(frames.map(encode))
          const decoder = new FrameDecoder()
          const decoded: Frame[] = []
          for (const piece of cut(stream, offsets)) decoded.push(...decoder.push(piece))
          decoder.end()
          expect(decoded.map(normalise)).toEqual(frames.map(normalise))
          expect(decoder.bufferedBytes).toBe(0)
        },
      ),
      { numRuns: 300 },
    )
  })

  it('feeding one byte at a time gives the same frames', () => {
    fc.assert(
      fc.property(fc.array(anyFrame, { maxLength: 4 }), (frames) => {
        const stream = concat(frames.map(encode))
        const decoder = new FrameDecoder()
        const decoded: Frame[] = []
        for (let i = 0; i < stream.byteLength; i++)
          decoded.push(...decoder.push(stream.subarray(i, i + 1)))
        expect(decoded.map(normalise)).toEqual(frames.map(normalise))
      }),
      { numRuns: 50 },
    )
  })

  it('never throws anything but FrameError on arbitrary bytes, and never buffers past the limit', () => {
    fc.assert(
      fc.property(fc.array(fc.uint8Array({ maxLength: 600 }), { maxLength: 20 }), (chunks) => {
        const decoder = new FrameDecoder({ maxFrameBytes: 512 })
        try {
          for (const chunk of chunks) {
            decoder.push(chunk)
            expect(decoder.bufferedBytes).toBeLessThanOrEqual(512 + 4 + 600)
          }
          decoder.end()
        } catch (error) {
          expect(error).toBeInstanceOf(FrameError)
        }
      }),
      { numRuns: 500 },
    )
  })

  it('refuses a length above the limit as soon as the header arrives', () => {
    fc.assert(
      fc.property(fc.integer({ min: 1025, max: 0xffffffff }), (length) => {
        const header = new Uint8Array(4)
        new DataView(header.buffer).setUint32(0, length)
        const decoder = new FrameDecoder({ maxFrameBytes: 1024 })
        expect(() => decoder.push(header)).toThrow(expect.objectContaining({ reason: 'too-large' }))
      }),
    )
  })

  it('classifies malformed frames', () => {
    const frame = (body: number[]): Uint8Array => {
      const out = new Uint8Array(4 + body.length)
      new DataView(out.buffer).setUint32(0, body.length)
      out.set(body, 4)
      return out
    }
    const reasonOf = (bytes: Uint8Array): string | undefined => {
      try {
        new FrameDecoder().push(bytes)
        return undefined
      } catch (error) {
        return (error as FrameError).reason
      }
    }
    const json = (text: string): number[] => [1, ...new TextEncoder().encode(text)]
    expect(reasonOf(frame([]))).toBe('empty')
    expect(reasonOf(frame([9, 1, 2]))).toBe('unknown-kind')
    expect(reasonOf(frame([2]))).toBe('bad-channel')
    expect(reasonOf(frame([2, 7, 1]))).toBe('bad-channel')
    expect(reasonOf(frame(json('{"type":')))).toBe('bad-json')
    expect(reasonOf(frame(json('[1,2]')))).toBe('bad-json')
    expect(reasonOf(frame(json('{"no":"type"}')))).toBe('bad-json')
    expect(reasonOf(frame([1, 0xff, 0xfe]))).toBe('bad-json')
    expect(reasonOf(frame(json('{"type":"ok"}')))).toBeUndefined()
  })

  it('reports a stream that ends inside a frame, and stays failed after an error', () => {
    fc.assert(
      fc.property(anyFrame, fc.nat(), (frame, at) => {
        const bytes = encode(frame)
        const cutAt = 1 + (at % (bytes.byteLength - 1))
        const decoder = new FrameDecoder()
        decoder.push(bytes.subarray(0, cutAt))
        expect(() => decoder.end()).toThrow(FrameError)
        expect(() => decoder.push(bytes.subarray(cutAt))).toThrow(FrameError)
      }),
      { numRuns: 100 },
    )
  })

  it('carries binary data without encoding overhead beyond six bytes a frame', () => {
    const data = new Uint8Array(64 * 1024).map((_, i) => i % 256)
    expect(encodeDataFrame('file', data).byteLength).toBe(data.byteLength + 6)
  })
})

describe('hand-over after one frame (adopt-session)', () => {
  it('readAndRelease decodes nothing past the frame: the bytes after it stay in the socket, heartbeats before it are skipped', async () => {
    const { PassThrough } = await import('node:stream')
    const { FramedConnection } = await import('../src/protocol/framed-connection.js')
    const socket = new PassThrough()
    const connection = new FramedConnection(socket)
    // Another protocol's bytes follow the answer in the same chunk; they are not frames.
    const trailing = Buffer.from([0, 0, 0, 0, 9, 1, 255, 255, 255, 255])
    const reading = connection.readAndRelease()
    socket.write(
      Buffer.concat([
        encodeMessageFrame({ type: 'heartbeat' }),
        encodeMessageFrame({ type: 'session-adopted' }),
        trailing,
      ]),
    )
    const frame = await reading
    expect(frame).toEqual({ kind: 'message', message: { type: 'session-adopted' } })
    expect(connection.isClosed).toBe(true)
    socket.write(Buffer.from('later'))
    const received: Buffer[] = []
    socket.on('data', (chunk: Buffer) => received.push(chunk))
    socket.resume()
    await new Promise((resolve) => setImmediate(resolve))
    expect(Buffer.concat(received)).toEqual(Buffer.concat([trailing, Buffer.from('later')]))
  })
})
