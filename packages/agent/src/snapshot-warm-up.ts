/**
 * What the agent's loader does while Node builds a startup snapshot of it
 * (`node --snapshot-blob <blob> --build-snapshot cordon-agent-loader.cjs`,
 * made by `makeAgentSnapshot`): it runs through the parts of Node that the
 * agent's start and its first commands use, so that V8 has compiled them
 * before the snapshot is taken and a sandbox's Node starts with them compiled.
 *
 * Why: every function V8 compiles reads the monotonic clock four or five
 * times (code-cache-loader.ts), and inside a gVisor sandbox's first second
 * each read is a system call. The agent's own program comes compiled from
 * its code cache; Node's own modules (streams, sockets, the file system
 * calls, timers) were still compiled as the agent first used them. Counted
 * on the host with gdb (a breakpoint on glibc's clock_gettime), the agent
 * run through makeAgentCodeCache's warm-up read the clock 8,322-8,440 times
 * started on the loader and 3,008-3,030 times started from this snapshot,
 * its code cache in place both times; a probe program using those modules
 * the same way, 2,814 times as a script, 1,945 from a snapshot that only
 * loaded them and 267 from one warmed up like this (bench/misses.md).
 *
 * Only modules Node supports in a snapshot's builder are used (node:vm,
 * node:module and node:child_process are not, so the agent's spawn path and
 * the loader's own calls are compiled at each start). Only Node's own code
 * runs here, never the agent's: nothing the agent reads or makes (its
 * configuration, its secret, random bytes, descriptors) can end up in the
 * snapshot. Everything opened is closed again, and Node
 * takes the snapshot once the event loop is empty. The snapshot is built
 * with an environment of PATH alone, in a temporary directory removed
 * afterwards, and the warm-up names its files relative to it, since every
 * sandbox's volume holds the blob.
 */
import { once } from 'node:events'
import {
  chmodSync,
  closeSync,
  fstatSync,
  lstatSync,
  mkdirSync,
  mkdtempSync,
  openSync,
  read,
  readdirSync,
  readFileSync,
  readlinkSync,
  readSync,
  realpathSync,
  renameSync,
  rmSync,
  statSync,
  unlinkSync,
  writeFileSync,
  writeSync,
  writevSync,
} from 'node:fs'
import { createConnection, createServer, Socket } from 'node:net'
import { join } from 'node:path'
import { PassThrough, Readable, Writable } from 'node:stream'
import { setTimeout as sleep } from 'node:timers/promises'
import { promisify } from 'node:util'

/** Runs the warm-up; the snapshot is taken after it has ended (and everything it opened is closed). */
export function warmUpNodeForSnapshot(): void {
  // Relative to the working directory (makeAgentSnapshot's temporary one):
  // what Node keeps of the paths it was given then names no host directory.
  const dir = mkdtempSync('cordon-agent-warm-up-')
  void (async () => {
    try {
      await useFiles(dir)
      await useSockets(join(dir, 'warm-up.sock'))
      await useStreamsAndTimers()
      useBuffersAndProcess()
    } finally {
      rmSync(dir, { recursive: true, force: true })
    }
  })().catch((error: unknown) => {
    // A warm-up that fails leaves a snapshot with less compiled, never a
    // different program; the builder is told, and makeAgentSnapshot fails.
    process.stderr.write(`the snapshot's warm-up failed: ${(error as Error).stack ?? error}\n`)
    process.exitCode = 1
  })
}

/** The synchronous and asynchronous file calls the agent's file operations make. */
async function useFiles(dir: string): Promise<void> {
  const nested = join(dir, 'a', 'b')
  mkdirSync(nested, { recursive: true, mode: 0o755 })
  const path = join(nested, 'file')
  const fd = openSync(path, 'wx', 0o644)
  writeSync(fd, Buffer.from('warm-up\n'))
  writevSync(fd, [Buffer.from('a'), new Uint8Array([98, 10])])
  const stats = fstatSync(fd)
  stats.isFile()
  stats.isDirectory()
  stats.isCharacterDevice()
  chmodSync(path, 0o640)
  readlinkSync(`/proc/self/fd/${fd}`)
  closeSync(fd)
  const readable = openSync(path, 'r')
  const buffer = Buffer.allocUnsafe(64)
  readSync(readable, buffer, 0, buffer.byteLength, null)
  await promisify(read)(readable, buffer, 0, buffer.byteLength, 0)
  closeSync(readable)
  writeFileSync(join(dir, 'other'), 'x')
  readFileSync(path, 'utf8')
  readFileSync(path)
  statSync(path, { throwIfNoEntry: false })
  lstatSync(join(dir, 'missing'), { throwIfNoEntry: false })
  // Of a path that is the same on every host (an absolute one in the snapshot reveals nothing).
  realpathSync.native('/')
  readdirSync(dir, { withFileTypes: true })
  renameSync(join(dir, 'other'), join(nested, 'moved'))
  unlinkSync(join(nested, 'moved'))
}

/** A unix socket's server and client, as the agent's listeners and their hosts use one. */
async function useSockets(path: string): Promise<void> {
  const server = createServer({ pauseOnConnect: true }, (accepted) => {
    accepted.on('data', (data: Buffer) => {
      accepted.cork()
      accepted.write(data)
      accepted.uncork()
    })
    accepted.on('end', () => accepted.end())
    accepted.resume()
  })
  server.listen(path)
  await once(server, 'listening')
  const client = createConnection(path)
  await once(client, 'connect')
  const echoed = new Promise<void>((resolve) => {
    let received = 0
    client.on('data', (data: Buffer) => {
      received += data.byteLength
      if (received >= 4 * 1024) resolve()
    })
  })
  for (let sent = 0; sent < 4; sent++) client.write(Buffer.alloc(1024, sent))
  await echoed
  client.end()
  await once(client, 'close')
  server.close()
  await once(server, 'close')
  // A socket made around nothing yet, as the agent wraps an accepted handle.
  new Socket().destroy()
}

/** The Buffer and process calls of the agent's handshake and bookkeeping. */
function useBuffersAndProcess(): void {
  const buffer = Buffer.alloc(64)
  buffer.writeUInt32BE(0xdeadbeef, 0)
  buffer.writeInt32BE(-2, 4)
  buffer.readInt32BE(4)
  buffer.readUInt32BE(0)
  buffer.subarray(8, 16).fill(7)
  Buffer.from(buffer.toString('hex'), 'hex').equals(buffer)
  Buffer.concat([buffer, Buffer.allocUnsafe(8)]).copy(buffer)
  process.hrtime.bigint()
  process.umask()
  setTimeout(() => {}, 0).unref()
}

/** Streams as the agent's framing and transfers use them, and its timers. */
async function useStreamsAndTimers(): Promise<void> {
  const chunks: Buffer[] = []
  const sink = new Writable({
    write(chunk: Buffer, _encoding, callback) {
      chunks.push(chunk)
      callback()
    },
  })
  const through = new PassThrough()
  through.pipe(sink)
  for await (const chunk of Readable.from([Buffer.from('a'), Buffer.from('b')]))
    through.write(chunk)
  through.end()
  await once(sink, 'finish')
  Buffer.concat(chunks).toString('hex')
  JSON.parse(JSON.stringify({ type: 'warm-up', values: [1, 'two'] }))
  new TextDecoder().decode(new TextEncoder().encode('warm-up'))
  const interval = setInterval(() => {}, 1)
  await sleep(2)
  clearInterval(interval)
  await new Promise((resolve) => setTimeout(resolve, 1))
  await new Promise((resolve) => setImmediate(resolve))
  performance.now()
}
