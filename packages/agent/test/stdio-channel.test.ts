/**
 * A StdioChannel keeps its carrier (here a real unix socket, as a Docker
 * attach is) referenced only while a stream is open. Its streams close in a
 * burst when the channel ends, by when the carrier is destroyed; a destroyed
 * `net.Socket` answers each `ref()`/`unref()` with a `connect` listener that
 * never fires, so telling it on every close would pile them up.
 */
import { once } from 'node:events'
import { mkdtemp, rm } from 'node:fs/promises'
import { connect, createServer, type Server, type Socket } from 'node:net'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { afterEach, describe, expect, it } from 'vitest'
import { type MuxStream, StreamMux } from '../src/protocol/index.js'
import { StdioChannel } from '../src/sandbox/index.js'

const STREAMS = 40

interface Pair {
  readonly channel: StdioChannel
  /** The host's carrier: what the channel refs and unrefs. */
  readonly carrier: Socket
  /** The agent's end of the carrier. */
  readonly far: Socket
  readonly agent: StreamMux
  /** Streams the host opened or the agent opened to it, as the host sees them. */
  readonly hostStreams: MuxStream[]
}

const cleanup: Array<() => Promise<void> | void> = []

afterEach(async () => {
  for (const step of cleanup.splice(0).reverse()) await step()
})

async function channelPair(): Promise<Pair> {
  const dir = await mkdtemp(join(tmpdir(), 'cordon-stdio-channel-'))
  const path = join(dir, 'carrier.sock')
  const server: Server = createServer()
  server.listen(path)
  await once(server, 'listening')
  const accepted = once(server, 'connection') as Promise<[Socket]>
  const carrier = connect({ path })
  await once(carrier, 'connect')
  const [far] = await accepted
  cleanup.push(async () => {
    carrier.destroy()
    far.destroy()
    server.close()
    await rm(dir, { recursive: true, force: true })
  })
  far.on('error', () => {})
  carrier.on('error', () => {})
  const hostStreams: MuxStream[] = []
  const agent = new StreamMux(far, far, {
    initiator: false,
    onStream: (stream) => stream.on('error', () => {}),
  })
  const channel = new StdioChannel({
    fromAgent: carrier,
    toAgent: carrier,
    keepAlive: carrier,
    onStream: (stream) => {
      stream.on('error', () => {})
      hostStreams.push(stream)
    },
    closeCarrier: () => {
      carrier.end()
      carrier.destroy()
    },
  })
  return { channel, carrier, far, agent, hostStreams }
}

/** Resolves once every stream has emitted `close`. */
function allClosed(streams: readonly MuxStream[]): Promise<unknown> {
  return Promise.all(
    streams.map((stream) => (stream.closed ? undefined : once(stream, 'close').catch(() => {}))),
  )
}

/** Collects MaxListenersExceededWarnings emitted while `run` runs (and a tick after). */
async function warningsDuring(run: () => Promise<void>): Promise<string[]> {
  const seen: string[] = []
  const onWarning = (warning: Error): void => {
    if (warning.name === 'MaxListenersExceededWarning') seen.push(warning.message)
  }
  process.on('warning', onWarning)
  try {
    await run()
    await new Promise((resolve) => setTimeout(resolve, 50))
  } finally {
    process.off('warning', onWarning)
  }
  return seen
}

describe('StdioChannel keep-alive', () => {
  it('leaves no connect listeners on its destroyed carrier when closed with many streams open', async () => {
    const { channel, carrier, agent, hostStreams } = await channelPair()
    // Streams both ways: the host's own, and ones the agent opens (egress tunnels).
    for (let i = 0; i < STREAMS; i++) {
      const stream = channel.open({ kind: 'test' })
      stream.on('error', () => {})
      hostStreams.push(stream)
      agent.open({ kind: 'egress' })
    }
    while (hostStreams.length < 2 * STREAMS) await new Promise((resolve) => setTimeout(resolve, 5))
    // Marking some spare and back exercises the other way in.
    for (const stream of hostStreams.slice(0, 5)) channel.setSpare(stream, true)
    for (const stream of hostStreams.slice(0, 5)) channel.setSpare(stream, false)

    const warnings = await warningsDuring(async () => {
      channel.close()
      await allClosed(hostStreams)
    })

    expect(carrier.destroyed).toBe(true)
    expect(carrier.listenerCount('connect')).toBe(0)
    expect(warnings).toEqual([])
  })

  it('leaves none when the far end goes away with many streams open', async () => {
    const { channel, carrier, far, agent, hostStreams } = await channelPair()
    for (let i = 0; i < STREAMS; i++) agent.open({ kind: 'egress' })
    while (hostStreams.length < STREAMS) await new Promise((resolve) => setTimeout(resolve, 5))

    const warnings = await warningsDuring(async () => {
      far.destroy()
      await allClosed(hostStreams)
      await new Promise((resolve) => setTimeout(resolve, 20))
    })

    expect(channel.isClosed).toBe(true)
    expect(carrier.destroyed).toBe(true)
    // At most the one unref() the session's end itself asks for.
    expect(carrier.listenerCount('connect')).toBeLessThanOrEqual(1)
    expect(warnings).toEqual([])
  })

  it('still refs the carrier while a stream is open and unrefs it when none is', async () => {
    const { channel, carrier } = await channelPair()
    const calls: string[] = []
    const ref = carrier.ref.bind(carrier)
    const unref = carrier.unref.bind(carrier)
    carrier.ref = () => {
      calls.push('ref')
      return ref()
    }
    carrier.unref = () => {
      calls.push('unref')
      return unref()
    }
    const first = channel.open({ kind: 'test' })
    const second = channel.open({ kind: 'test' })
    for (const stream of [first, second]) stream.on('error', () => {})
    channel.setSpare(second, true)
    first.destroy()
    await once(first, 'close')
    channel.setSpare(second, false)
    second.destroy()
    await once(second, 'close')
    // Told only on a change: held while `first` (or `second`, not spare) is open.
    expect(calls).toEqual(['ref', 'unref', 'ref', 'unref'])
  })
})
