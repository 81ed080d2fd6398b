import { mkdtemp, rm, writeFile } from 'node:fs/promises'
import { connect, createServer, type Socket } from 'node:net'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { afterEach, describe, expect, it } from 'vitest'
import { serveReadFiles } from '../src/file-batch-read.js'
import { PathJail } from '../src/path-jail.js'
import { requestListFiles, requestReadFiles } from '../src/protocol/client-operations.js'
import { DEFAULT_MAX_FRAME_BYTES } from '../src/protocol/frame-codec.js'
import { FramedConnection } from '../src/protocol/framed-connection.js'
import { parseAgentMessage } from '../src/protocol/messages.js'

/**
 * Issue 17, item 4: the host sizes each batch-read buffer by what the agent
 * announces. An agent the sandbox had taken over (it runs inside the
 * sandbox) must not make the host allocate more than was listed, and listed
 * sizes are what the host checked against its limit.
 */

const closers: Array<() => void> = []
afterEach(() => {
  for (const close of closers.splice(0)) close()
})

/** A connected pair of framed connections: the host's end and a fake agent's. */
async function pair(): Promise<{ host: FramedConnection; agent: FramedConnection }> {
  const accepted = new Promise<Socket>((resolve) => {
    const server = createServer(resolve)
    closers.push(() => server.close())
    server.listen(0, '127.0.0.1', () => {
      const { port } = server.address() as { port: number }
      const socket = connect({ port, host: '127.0.0.1' })
      closers.push(() => socket.destroy())
      hostSocket = socket
    })
  })
  let hostSocket: Socket | undefined
  const agentSocket = await accepted
  closers.push(() => agentSocket.destroy())
  const options = { maxFrameBytes: DEFAULT_MAX_FRAME_BYTES }
  return {
    host: new FramedConnection(hostSocket!, options),
    agent: new FramedConnection(agentSocket, options),
  }
}

async function fakeAgent(agent: FramedConnection, announced: number): Promise<void> {
  await agent.read() // read-files
  await agent.send({ type: 'entries', entries: [{ path: '/out/small', size: 4, modifiedMs: 0 }] })
  await agent.send({ type: 'end' })
  await agent.read() // proceed
  await agent.send({ type: 'file-begin', path: '/out/small', size: announced })
}

describe('a batch read never allocates more than was listed', () => {
  it('refuses a file announced larger than its listing, before allocating it', async () => {
    const { host, agent } = await pair()
    const serving = fakeAgent(agent, 2 ** 31)
    const batch = await requestReadFiles(host, '/out')
    expect(batch.entries).toEqual([{ path: '/out/small', size: 4, modifiedMs: 0 }])
    const before = process.memoryUsage().arrayBuffers
    const reading = (async () => {
      for await (const _ of batch.proceed()) {
        // nothing is yielded
      }
    })()
    await expect(reading).rejects.toThrow(/2147483648 bytes announced, 4 listed/)
    expect(process.memoryUsage().arrayBuffers - before).toBeLessThan(64 * 1024 * 1024)
    await serving
  })

  it('refuses a file that was never listed', async () => {
    const { host, agent } = await pair()
    const serving = (async () => {
      await agent.read()
      await agent.send({ type: 'entries', entries: [] })
      await agent.send({ type: 'end' })
      await agent.read()
      await agent.send({ type: 'file-begin', path: '/etc/other', size: 1 })
    })()
    const batch = await requestReadFiles(host, '/out')
    const reading = (async () => {
      for await (const _ of batch.proceed()) {
      }
    })()
    await expect(reading).rejects.toThrow(/none listed/)
    await serving
  })
})

describe('a listing', () => {
  it('asks for files read while listing, and takes entries without a time there', async () => {
    const { host, agent } = await pair()
    const serving = (async () => {
      const request = await agent.read()
      await agent.send({ type: 'entries', entries: [{ path: '/out/a', size: 1 }] })
      await agent.send({ type: 'end' })
      return request
    })()
    const batch = await requestReadFiles(host, '/out')
    expect(batch.entries).toEqual([{ path: '/out/a', size: 1 }])
    expect(await serving).toMatchObject({
      kind: 'message',
      message: { type: 'read-files', path: '/out', readWhileListing: true },
    })
    batch.abandon()
  })

  it('of list-files refuses an entry without its modification time', async () => {
    const { host, agent } = await pair()
    void (async () => {
      await agent.read()
      await agent.send({ type: 'entries', entries: [{ path: '/out/a', size: 1 }] })
      await agent.send({ type: 'end' })
    })()
    await expect(requestListFiles(host, '/out')).rejects.toThrow(
      /\/out\/a: listed without its modification time/,
    )
  })
})

describe('an agent asked for a batch without readWhileListing (an earlier host)', () => {
  it('lists every file with its time and reads it after the host proceeds, as it is then', async () => {
    const root = await mkdtemp(join(tmpdir(), 'cordon-batch-untimed-'))
    closers.push(() => void rm(root, { recursive: true, force: true }))
    await writeFile(join(root, 'a.txt'), 'before')
    const { host, agent } = await pair()
    const serving = serveReadFiles(
      agent,
      { type: 'read-files', path: root },
      new PathJail([root], [root]),
    )
    const listing = await host.read()
    const entries = listing?.kind === 'message' ? parseAgentMessage(listing.message) : undefined
    expect(entries).toMatchObject({
      type: 'entries',
      entries: [{ path: join(root, 'a.txt'), size: 6, modifiedMs: expect.any(Number) }],
    })
    // Changed after the listing, to as many bytes: read after `proceed`, so as it is now.
    await writeFile(join(root, 'a.txt'), 'after!')
    await host.read() // end of the listing
    await host.send({ type: 'proceed' })
    const begin = await host.read()
    expect(begin?.kind === 'message' && parseAgentMessage(begin.message)).toMatchObject({
      type: 'file-begin',
      size: 6,
    })
    const data = await host.read()
    expect(data?.kind === 'data' && Buffer.from(data.data).toString()).toBe('after!')
    await serving
  })
})
