import { createHash, randomBytes } from 'node:crypto'
import { once } from 'node:events'
import { existsSync, readdirSync, rmSync } from 'node:fs'
import { chmod, mkdtemp, readdir, readFile, rm, symlink, writeFile } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { afterEach, describe, expect, it } from 'vitest'
import {
  ProtocolError,
  parseClientMessage,
  STAGED_AHEAD,
  STAGED_PIECE_BYTES,
  type UploadStage,
} from '../src/protocol/index.js'
import type { AgentClient } from '../src/sandbox/index.js'
import { startSocketAgent } from './agent-harness.js'

/**
 * An upload's pieces handed over as files in the agent's stage, the
 * directory of its host-backed socket (staged-pieces.ts): every byte in
 * order, mixed with pieces that came as bytes, and a piece that is not what
 * was announced (a link, a FIFO, another size, a name that climbs out)
 * refused without the agent reading it or waiting on it.
 */

const cleanups: Array<() => Promise<void> | void> = []
afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup()
})

const digest = (bytes: Uint8Array) => createHash('sha256').update(bytes).digest('hex')

/** An agent serving stdio with a host-backed socket in a fresh directory (its stage). */
async function agentWithStage(withStage = true): Promise<{
  client: (stage?: UploadStage) => AgentClient
  dir: string
}> {
  const dir = await mkdtemp(join(tmpdir(), 'cordon-staged-'))
  cleanups.push(() => rm(dir, { recursive: true, force: true }))
  await chmod(dir, 0o755)
  const socketDir = join(dir, 'agent')
  const roots = join(dir, 'roots')
  await Promise.all([
    import('node:fs/promises').then((fs) => fs.mkdir(socketDir, { mode: 0o700 })),
    import('node:fs/promises').then((fs) => fs.mkdir(roots, { mode: 0o755 })),
  ])
  const { child, client } = await startSocketAgent({
    socket: join(socketDir, 'files.sock'),
    writeRoots: roots,
    hostBacked: withStage,
  })
  cleanups.push(async () => {
    if (child.exitCode === null && child.signalCode === null) {
      child.kill('SIGKILL')
      await once(child, 'exit')
    }
  })
  return { dir: roots, client }
}

/** A stage in `directory` as a host would keep it; `plant` may put something else at a name. */
function stageIn(
  directory: string,
  plant?: (path: string, bytes: Buffer, index: number) => Promise<boolean>,
): UploadStage & { staged: string[]; refused: number; mostWaiting: number } {
  const stage = {
    staged: [] as string[],
    refused: 0,
    /** The most pieces found waiting in the stage when another was put. */
    mostWaiting: 0,
    async put(pieces: readonly Uint8Array[], _bytes: number): Promise<string | undefined> {
      const waiting = readdirSync(directory).filter((entry) => entry.endsWith('.upload')).length
      stage.mostWaiting = Math.max(stage.mostWaiting, waiting)
      const name = `${randomBytes(16).toString('hex')}.upload`
      const path = join(directory, name)
      const bytes = Buffer.concat(pieces)
      if (plant && !(await plant(path, bytes, stage.staged.length + stage.refused))) {
        stage.refused++
        return undefined
      }
      if (!existsSync(path)) await writeFile(path, bytes, { flag: 'wx', mode: 0o600 })
      stage.staged.push(name)
      return name
    },
    discard(name: string): void {
      rmSync(join(directory, name), { force: true })
    },
  }
  return stage
}

async function* piecesOf(data: Buffer, size = 64 * 1024): AsyncGenerator<Uint8Array> {
  for (let offset = 0; offset < data.byteLength; offset += size)
    yield data.subarray(offset, offset + size)
}

const uploads = async (dir: string) =>
  (await readdir(join(dir, '..', 'agent'))).filter((name) => name.endsWith('.upload'))

describe('staged upload pieces', () => {
  it('takes 24 MiB as staged pieces, and pieces mixed with bytes when the stage is full, in order', async () => {
    const { client, dir } = await agentWithStage()
    const stageDir = join(dir, '..', 'agent')
    const data = randomBytes(24 * 1024 * 1024 + 123)
    const all = stageIn(stageDir)
    const target = join(dir, 'staged.bin')
    expect(await client(all).writeFile(target, piecesOf(data), { size: data.byteLength })).toBe(
      data.byteLength,
    )
    expect(digest(await readFile(target))).toBe(digest(data))
    expect(all.staged.length).toBe(Math.floor(data.byteLength / STAGED_PIECE_BYTES))
    // The host holds at most STAGED_AHEAD pieces not yet taken, this one included.
    expect(all.mostWaiting).toBeLessThanOrEqual(STAGED_AHEAD - 1)
    // Every other piece "does not fit" and crosses as bytes instead.
    const half = stageIn(stageDir, async (_path, _bytes, index) => index % 2 === 0)
    const mixed = join(dir, 'mixed.bin')
    await client(half).writeFile(mixed, piecesOf(data, 1024 * 1024 + 7), {})
    expect(digest(await readFile(mixed))).toBe(digest(data))
    expect(half.staged.length).toBeGreaterThan(0)
    expect(half.refused).toBeGreaterThan(0)
    expect(await uploads(dir)).toEqual([])
  })

  it('takes the large files of a batch as staged pieces, in hand or streamed, beside small ones', async () => {
    const { client, dir } = await agentWithStage()
    const stage = stageIn(join(dir, '..', 'agent'))
    const inHand = randomBytes(10 * 1024 * 1024 + 5)
    const streamed = randomBytes(9 * 1024 * 1024 + 11)
    const small = randomBytes(3_000)
    const result = await client(stage).writeFiles(dir, [
      { path: join(dir, 'a/small.bin'), content: small },
      { path: join(dir, 'a/in-hand.bin'), content: inHand },
      {
        path: join(dir, 'b/streamed.bin'),
        content: { size: streamed.byteLength, pieces: () => piecesOf(streamed) },
      },
      { path: join(dir, 'b/small.bin'), content: small },
    ])
    expect(result).toEqual({
      files: 4,
      bytes: inHand.byteLength + streamed.byteLength + 2 * small.byteLength,
    })
    expect(digest(await readFile(join(dir, 'a/in-hand.bin')))).toBe(digest(inHand))
    expect(digest(await readFile(join(dir, 'b/streamed.bin')))).toBe(digest(streamed))
    expect(await readFile(join(dir, 'b/small.bin'))).toEqual(small)
    // Two whole pieces of each large file; their tails (under 4 MiB) as frames.
    expect(stage.staged.length).toBe(4)
    expect(await uploads(dir)).toEqual([])
  })

  it('refuses a piece that is a link, a FIFO or not the announced size, leaves the target as it was and the stage empty', async () => {
    const { client, dir } = await agentWithStage()
    const stageDir = join(dir, '..', 'agent')
    const secretFile = join(dir, '..', 'host-secret')
    await writeFile(secretFile, 'host secret '.repeat(400_000))
    const target = join(dir, 'kept.txt')
    await writeFile(target, 'before')
    const data = randomBytes(12 * 1024 * 1024)
    const plants: Record<string, (path: string, bytes: Buffer) => Promise<boolean>> = {
      link: async (path) => {
        await symlink(secretFile, path)
        return true
      },
      fifo: async (path) => {
        const { execFileSync } = await import('node:child_process')
        execFileSync('mkfifo', [path])
        return true
      },
      'short piece': async (path, bytes) => {
        await writeFile(path, bytes.subarray(1))
        return true
      },
    }
    for (const [what, plant] of Object.entries(plants)) {
      const stage = stageIn(stageDir, (path, bytes, index) =>
        index === 1 ? plant(path, bytes) : Promise.resolve(true),
      )
      await expect(
        client(stage).writeFile(target, piecesOf(data), { size: data.byteLength }),
        what,
      ).rejects.toThrow()
      expect(await readFile(target, 'utf8'), what).toBe('before')
      expect(await uploads(dir), what).toEqual([])
    }
    expect(existsSync(secretFile)).toBe(true)
  })

  it('an agent without a stage refuses staged pieces; a name with a directory part is not even parsed', async () => {
    const { client, dir } = await agentWithStage(false)
    const elsewhere = await mkdtemp(join(tmpdir(), 'cordon-staged-elsewhere-'))
    cleanups.push(() => rm(elsewhere, { recursive: true, force: true }))
    const data = randomBytes(8 * 1024 * 1024)
    await expect(
      client(stageIn(elsewhere)).writeFile(join(dir, 'x.bin'), piecesOf(data), {}),
    ).rejects.toThrow(/no stage/)
    expect(existsSync(join(dir, 'x.bin'))).toBe(false)
    for (const name of [
      '../etc/passwd',
      'a/0123456789abcdef0123456789abcdef.upload',
      'x.upload',
      '',
    ])
      expect(() => parseClientMessage({ type: 'staged', name, bytes: 1 }), name).toThrow(
        ProtocolError,
      )
    expect(() =>
      parseClientMessage({ type: 'staged', name: `${'a'.repeat(32)}.upload`, bytes: 0 }),
    ).toThrow(ProtocolError)
  })
})
