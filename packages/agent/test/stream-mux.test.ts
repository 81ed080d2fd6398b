import { randomBytes } from 'node:crypto'
import { once } from 'node:events'
import { PassThrough, Transform, Writable } from 'node:stream'
import fc from 'fast-check'
import { describe, expect, it } from 'vitest'
import {
  MuxProtocolError,
  type MuxStream,
  STREAM_WINDOW_BYTES,
  StreamMux,
  type StreamOpening,
} from '../src/protocol/stream-mux.js'

/** Splits every chunk it passes at random points, like a pipe would. */
function chopper(seed: number): Transform {
  let state = seed
  return new Transform({
    transform(chunk: Buffer, _encoding, callback) {
      let rest = chunk
      while (rest.byteLength > 0) {
        state = (state * 1103515245 + 12345) % 2 ** 31
        const size = Math.max(1, state % Math.max(1, Math.min(rest.byteLength, 7000)))
        this.push(rest.subarray(0, size))
        rest = rest.subarray(size)
      }
      callback()
    },
  })
}

function pair(
  onStream: (stream: MuxStream, opening: StreamOpening) => void,
  seed = 1,
): { host: StreamMux; agent: StreamMux; toAgent: PassThrough; toHost: PassThrough } {
  const toAgent = new PassThrough()
  const toHost = new PassThrough()
  const host = new StreamMux(toHost.pipe(chopper(seed)), toAgent, { initiator: true })
  const agent = new StreamMux(toAgent.pipe(chopper(seed + 1)), toHost, {
    initiator: false,
    onStream,
  })
  return { host, agent, toAgent, toHost }
}

async function readAll(stream: MuxStream): Promise<Buffer> {
  const chunks: Buffer[] = []
  // Reading to the end must not destroy the stream: its other half may still be writing.
  for await (const chunk of stream.iterator({ destroyOnReturn: false }))
    chunks.push(chunk as Buffer)
  return Buffer.concat(chunks)
}

/** The agent side echoes every stream back, upper-casing nothing: byte for byte. */
const echo = (stream: MuxStream): void => {
  stream.on('error', () => {})
  stream.pipe(stream)
}

describe('StreamMux', () => {
  it('carries many concurrent streams byte for byte, whatever the pipe splits', async () => {
    await fc.assert(
      fc.asyncProperty(
        fc.integer({ min: 1, max: 10_000 }),
        fc.array(fc.integer({ min: 0, max: 300_000 }), { minLength: 1, maxLength: 6 }),
        async (seed, sizes) => {
          const { host } = pair(echo, seed)
          const payloads = sizes.map((size) => randomBytes(size))
          const results = await Promise.all(
            payloads.map(async (payload) => {
              const stream = host.open({ kind: 'echo' })
              const reading = readAll(stream)
              stream.end(payload)
              return reading
            }),
          )
          for (const [index, result] of results.entries())
            expect(result.equals(payloads[index]!)).toBe(true)
          host.close()
        },
      ),
      { numRuns: 15 },
    )
  })

  it('passes the opening to the other side and keeps half-close', async () => {
    let seen: StreamOpening | undefined
    const { host } = pair((stream, opening) => {
      seen = opening
      // Answer only after the request side has ended, then end too.
      void readAll(stream).then((request) => stream.end(Buffer.concat([request, Buffer.from('!')])))
    })
    const stream = host.open({ kind: 'agent', service: 'files' })
    const answer = readAll(stream)
    stream.end('question')
    expect((await answer).toString()).toBe('question!')
    expect(seen).toEqual({ kind: 'agent', service: 'files' })
  })

  it('stalls only the stream whose reader stops, within its window', async () => {
    const big = randomBytes(4 * 1024 * 1024)
    const streams: MuxStream[] = []
    const { host } = pair((stream) => {
      streams.push(stream)
      stream.end(big)
    })
    const stalled = host.open({ kind: 'stalled' })
    stalled.pause()
    const flowing = host.open({ kind: 'flowing' })
    const received = await readAll(flowing)
    expect(received.equals(big)).toBe(true)
    // The stalled stream holds at most its window plus one read buffer.
    expect(stalled.readableLength).toBeLessThanOrEqual(STREAM_WINDOW_BYTES + 64 * 1024)
    stalled.resume()
    expect((await readAll(stalled)).equals(big)).toBe(true)
  })

  it('resets a stream both ways without touching the others', async () => {
    const { host } = pair(echo)
    const doomed = host.open({ kind: 'doomed' })
    const healthy = host.open({ kind: 'healthy' })
    doomed.destroy()
    const answer = readAll(healthy)
    healthy.end('still fine')
    expect((await answer).toString()).toBe('still fine')
  })

  it('ends every stream when the channel ends, and refuses a peer that breaks the framing', async () => {
    const { host, toHost } = pair(() => {})
    const stream = host.open({ kind: 'waiting' })
    const failed = once(stream, 'error')
    toHost.end()
    const [error] = await failed
    expect((error as Error).message).toContain('ended')
    expect(host.isClosed).toBe(true)

    const raw = new PassThrough()
    const broken = new StreamMux(raw, new PassThrough(), { initiator: true })
    const closed = new Promise<Error>((resolve) => broken.onClose(resolve))
    const frame = Buffer.alloc(9)
    frame.writeUInt32BE(2, 0)
    frame.writeUInt8(2, 4)
    frame.writeUInt32BE(10 * 1024 * 1024, 5)
    raw.write(frame)
    expect(await closed).toBeInstanceOf(MuxProtocolError)
  })

  it('a close listener taken back is not called, and the others still are', async () => {
    const { host, toHost } = pair(() => {})
    const heard: string[] = []
    const takeBack = host.onClose(() => heard.push('taken back'))
    host.onClose(() => heard.push('kept'))
    takeBack()
    takeBack()
    const closed = new Promise<Error>((resolve) => host.onClose(resolve))
    toHost.end()
    await closed
    expect(heard).toEqual(['kept'])
  })

  it('a write that fails just as the session is released does not crash the process', async () => {
    // Node emits a failed write's error (EPIPE: the peer went away) on the
    // next tick; a release in between has already taken the session's
    // listener off the pipe. Seen in CI with the socket pipe's carrier.
    let failing = false
    let host: StreamMux | undefined
    const output = new Writable({
      write(_chunk, _encoding, callback) {
        if (!failing) return callback()
        callback(Object.assign(new Error('write EPIPE'), { code: 'EPIPE' }))
        host!.release()
      },
    })
    const errors: unknown[] = []
    const onUncaught = (error: unknown): void => {
      errors.push(error)
    }
    process.on('uncaughtException', onUncaught)
    try {
      host = new StreamMux(new PassThrough(), output, { initiator: true })
      const stream = host.open({ kind: 'agent' })
      stream.on('error', () => {})
      failing = true
      stream.end()
      await new Promise((resolve) => setTimeout(resolve, 20))
      expect(host.isClosed).toBe(true)
      expect(errors).toEqual([])
    } finally {
      process.off('uncaughtException', onUncaught)
    }
  })

  it('refuses a stream the peer opens on an id that is not its own', async () => {
    const raw = new PassThrough()
    const agent = new StreamMux(raw, new PassThrough(), { initiator: false, onStream: () => {} })
    const closed = new Promise<Error>((resolve) => agent.onClose(resolve))
    const payload = Buffer.from(JSON.stringify({ kind: 'x' }))
    const frame = Buffer.alloc(9)
    frame.writeUInt32BE(2, 0)
    frame.writeUInt8(1, 4)
    frame.writeUInt32BE(payload.byteLength, 5)
    raw.write(Buffer.concat([frame, payload]))
    expect((await closed).message).toContain('not its to open')
  })
})
