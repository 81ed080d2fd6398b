import { connect, createServer, type Socket } from 'node:net'
import { setTimeout as sleep } from 'node:timers/promises'
import { afterEach, describe, expect, it } from 'vitest'
import { requestReadFile } from '../src/protocol/client-operations.js'
import { DATA_CHUNK_BYTES, DEFAULT_MAX_FRAME_BYTES } from '../src/protocol/frame-codec.js'
import { FramedConnection } from '../src/protocol/framed-connection.js'

/**
 * A streamed download hands its consumer the frames that arrived while it
 * was busy as one piece (at most 1 MiB): a consumer pays per piece, and a
 * file stream's write is a round trip to Node's thread pool (100 MiB into a
 * host file: 437 against 135 ms, bench/misses.md).
 */

const closers: Array<() => void> = []
afterEach(() => {
  for (const close of closers.splice(0)) close()
})

async function pair(): Promise<{ host: FramedConnection; agent: FramedConnection }> {
  let hostSocket: Socket | undefined
  const accepted = new Promise<Socket>((resolve) => {
    const server = createServer(resolve)
    closers.push(() => server.close())
    server.listen(0, '127.0.0.1', () => {
      const { port } = server.address() as { port: number }
      hostSocket = connect({ port, host: '127.0.0.1' })
      closers.push(() => hostSocket!.destroy())
    })
  })
  const agentSocket = await accepted
  closers.push(() => agentSocket.destroy())
  const options = { maxFrameBytes: DEFAULT_MAX_FRAME_BYTES, highWaterFrames: 64 }
  return {
    host: new FramedConnection(hostSocket!, options),
    agent: new FramedConnection(agentSocket, options),
  }
}

/** The agent's side of a `read-file` of `frames` data frames, frame i filled with i. */
async function serveFile(agent: FramedConnection, frames: number): Promise<void> {
  await agent.read()
  await agent.send({ type: 'file-info', size: frames * DATA_CHUNK_BYTES, mode: 0o644 })
  for (let index = 0; index < frames; index++)
    await agent.sendData('file', new Uint8Array(DATA_CHUNK_BYTES).fill(index))
  await agent.send({ type: 'end' })
}

describe('a streamed download', () => {
  it('hands a consumer that fell behind the frames that arrived meanwhile as one piece of at most 1 MiB', async () => {
    const { host, agent } = await pair()
    const serving = serveFile(agent, 40)
    const download = await requestReadFile(host, '/out/big.bin')
    await serving
    // The consumer busy while every frame arrives.
    await sleep(100)
    const pieces: Uint8Array[] = []
    for await (const piece of download.chunks) pieces.push(piece)
    expect(pieces.map((piece) => piece.byteLength)).toEqual([
      16 * DATA_CHUNK_BYTES,
      16 * DATA_CHUNK_BYTES,
      8 * DATA_CHUNK_BYTES,
    ])
    // Every byte, in order.
    const whole = Buffer.concat(pieces)
    for (let index = 0; index < 40; index++)
      expect(
        whole
          .subarray(index * DATA_CHUNK_BYTES, (index + 1) * DATA_CHUNK_BYTES)
          .equals(Buffer.alloc(DATA_CHUNK_BYTES, index)),
      ).toBe(true)
  })

  it('hands a consumer that keeps up each frame as it comes, without waiting for more', async () => {
    const { host, agent } = await pair()
    const serving = (async () => {
      await agent.read()
      await agent.send({ type: 'file-info', size: 3 * DATA_CHUNK_BYTES, mode: 0o644 })
      for (let index = 0; index < 3; index++) {
        await agent.sendData('file', new Uint8Array(DATA_CHUNK_BYTES).fill(index))
        await sleep(30)
      }
      await agent.send({ type: 'end' })
    })()
    const download = await requestReadFile(host, '/out/slow.bin')
    const pieces: number[] = []
    for await (const piece of download.chunks) pieces.push(piece.byteLength)
    await serving
    expect(pieces).toEqual([DATA_CHUNK_BYTES, DATA_CHUNK_BYTES, DATA_CHUNK_BYTES])
  })
})
