import type { ChildProcess } from 'node:child_process'
import { createHash, randomBytes } from 'node:crypto'
import { once } from 'node:events'
import { chmod, mkdtemp, readFile, rm } from 'node:fs/promises'
import { connect, createServer, type Server, type Socket } from 'node:net'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { setTimeout as sleep } from 'node:timers/promises'
import { afterEach, describe, expect, it } from 'vitest'
import { LARGE_READ_BYTES, withLargeReads } from '../src/large-reads.js'
import { startSocketAgent } from './agent-harness.js'

/**
 * The agent's host-backed socket (gVisor's) reads its connections in pieces
 * of up to 1 MiB, not Node's 64 KiB (large-reads.ts). Whoever reads such a
 * socket must see it as any other: every byte in order, `end`, pause and
 * resume, a server that counts its connections.
 */

const cleanups: Array<() => Promise<void> | void> = []
afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup()
})

async function tempDir(): Promise<string> {
  const dir = await mkdtemp(join(tmpdir(), 'cordon-large-reads-'))
  cleanups.push(() => rm(dir, { recursive: true, force: true }))
  return dir
}

/** A unix server whose connections read large; resolves with the first one's socket. */
async function largeReadingServer(
  path: string,
): Promise<{ server: Server; accepted: Promise<Socket> }> {
  let resolveAccepted: (socket: Socket) => void = () => {}
  const accepted = new Promise<Socket>((resolve) => {
    resolveAccepted = resolve
  })
  const server = createServer({ pauseOnConnect: true }, (socket) => {
    resolveAccepted(withLargeReads(socket, server))
  })
  server.listen(path)
  await once(server, 'listening')
  cleanups.push(() => new Promise<void>((resolve) => server.close(() => resolve())))
  return { server, accepted }
}

async function sendAll(socket: Socket, data: Buffer): Promise<void> {
  for (let offset = 0; offset < data.byteLength; offset += 1024 * 1024)
    if (!socket.write(data.subarray(offset, offset + 1024 * 1024))) await once(socket, 'drain')
  socket.end()
}

describe('a connection that reads large', () => {
  it('gives every byte in order, in pieces larger than 64 KiB, then its end, and leaves the server closable', async () => {
    const path = join(await tempDir(), 's.sock')
    const { server, accepted } = await largeReadingServer(path)
    const client = connect(path)
    cleanups.push(() => void client.destroy())
    const data = randomBytes(16 * 1024 * 1024)
    const sending = sendAll(client, data)
    const socket = await accepted
    const pieces: Buffer[] = []
    socket.on('data', (piece: Buffer) => pieces.push(piece))
    await once(socket, 'end')
    await sending
    expect(Buffer.concat(pieces).equals(data)).toBe(true)
    expect(Math.max(...pieces.map((piece) => piece.byteLength))).toBeGreaterThan(64 * 1024)
    expect(Math.max(...pieces.map((piece) => piece.byteLength))).toBeLessThanOrEqual(
      LARGE_READ_BYTES,
    )
    // Counted by its server as one connection, gone once it closes.
    socket.end()
    await once(socket, 'close')
    client.destroy()
    await new Promise<void>((resolve, reject) =>
      server.close((error) => (error ? reject(error) : resolve())),
    )
  })

  it('reads nothing while paused and everything once resumed', async () => {
    const path = join(await tempDir(), 's.sock')
    const { accepted } = await largeReadingServer(path)
    const client = connect(path)
    cleanups.push(() => void client.destroy())
    const socket = await accepted
    let received = 0
    socket.on('data', (piece: Buffer) => {
      received += piece.byteLength
    })
    socket.pause()
    const data = randomBytes(4 * 1024 * 1024)
    const sending = sendAll(client, data)
    await sleep(200)
    expect(received).toBe(0)
    socket.resume()
    await once(socket, 'end')
    await sending
    expect(received).toBe(data.byteLength)
  })
})

describe("the agent's host-backed socket", () => {
  let child: ChildProcess | undefined
  afterEach(async () => {
    if (child && child.exitCode === null && child.signalCode === null) {
      child.kill('SIGKILL')
      await once(child, 'exit')
    }
  })

  it('takes a 32 MiB upload and gives it back, and serves a command, over its large reads', async () => {
    const dir = await tempDir()
    await chmod(dir, 0o755)
    const hostSocket = join(dir, 'host.sock')
    const agent = await startSocketAgent({ socket: hostSocket, writeRoots: dir })
    child = agent.child
    const client = agent.client()
    const data = randomBytes(32 * 1024 * 1024)
    async function* pieces(): AsyncGenerator<Uint8Array> {
      for (let offset = 0; offset < data.byteLength; offset += 64 * 1024)
        yield data.subarray(offset, offset + 64 * 1024)
    }
    const target = join(dir, 'up.bin')
    expect(await client.writeFile(target, pieces(), { size: data.byteLength })).toBe(
      data.byteLength,
    )
    const digest = (bytes: Uint8Array) => createHash('sha256').update(bytes).digest('hex')
    expect(digest(await readFile(target))).toBe(digest(data))
    const download = await client.readFile(target)
    const back: Uint8Array[] = []
    for await (const piece of download.chunks) back.push(piece)
    expect(digest(Buffer.concat(back))).toBe(digest(data))
    let out = ''
    const running = await client.startExec(
      { command: 'echo', args: ['served'], env: {}, stdin: false },
      { onStdout: (bytes) => (out += Buffer.from(bytes).toString()), onStderr: () => {} },
    )
    await running.result
    expect(out).toBe('served\n')
  })
})
