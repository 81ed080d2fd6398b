import { createWriteStream, type FSWatcher, watch } from 'node:fs'
import { mkdtemp, readdir, rm, statfs, writeFile } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { Readable } from 'node:stream'
import { pipeline } from 'node:stream/promises'
import { NODE_IMAGE } from '@cordon/test-support'
import { describe, expect, it, vi } from 'vitest'
import { HOST_SOCKET_DIR } from '../src/direct-socket.js'
import { HostUploadStage } from '../src/upload-stage.js'
import { deterministicBytes, digestOf } from './deterministic-bytes.js'
import { docker, testProvider } from './test-run.js'

/**
 * Issue 30: under gVisor an upload's bytes cross into the sandbox as files
 * the host writes beside the agent's host-backed socket (the agent's
 * staged-pieces.ts, the backend's upload-stage.ts), not as bytes on the
 * socket. Proved here in real gVisor sandboxes: the pieces appear in the
 * stage and are gone after, the file arrives byte-exact, the stage refuses
 * the sandbox's user, and an upload that fails leaves nothing there.
 */

const MIB = 1024 * 1024

/** Deterministic bytes in 64 KiB pieces, a file stream's size. */
const source = (total: number, seed: number) => deterministicBytes(total, seed, 64 * 1024)
const sha256 = async (chunks: AsyncIterable<Uint8Array>) => (await digestOf(chunks)).hash

/** Chunks already in memory, as a source. */
async function* inHand(chunks: readonly Uint8Array[]): AsyncGenerator<Uint8Array> {
  yield* chunks
}

/** Waits (briefly: a refused piece is removed as the refusal is sent) for no piece in the stage. */
async function expectStageEmpty(stage: string): Promise<void> {
  const pieces = async () => (await readdir(stage)).filter((name) => name.endsWith('.upload'))
  for (let waited = 0; waited < 2_000 && (await pieces()).length > 0; waited += 50)
    await new Promise((resolve) => setTimeout(resolve, 50))
  expect(await pieces()).toEqual([])
}

/** The stage's directory on the host: the source of the host-backed socket's volume. */
async function stageOnHost(sandboxId: string): Promise<string> {
  const info = await docker.getContainer(`cordon-${sandboxId}`).inspect()
  const mount = info.Mounts.find((entry) => entry.Destination === HOST_SOCKET_DIR)
  expect(mount?.Type).toBe('volume')
  return mount!.Source
}

/** Counts the pieces staged in `directory` while it is watched. */
function countPieces(directory: string): { pieces: Set<string>; watcher: FSWatcher } {
  const pieces = new Set<string>()
  const watcher = watch(directory, (_event, name) => {
    if (name?.endsWith('.upload')) pieces.add(name)
  })
  return { pieces, watcher }
}

const layout = { outputs: { source: { type: 'ephemeral' as const, sizeMb: 400 } } }

describe('staged upload pieces (gVisor)', () => {
  it('a 100 MiB upload crosses as staged pieces, arrives byte-exact, and leaves the stage empty', async () => {
    const provider = testProvider({ runtime: 'runsc', image: NODE_IMAGE }, { layout })
    try {
      const sandbox = await provider.create({ memoryLimitMb: 256 })
      const stage = await stageOnHost(sandbox.id)
      // The stage's room on the host: 16 MiB for pieces, 64 KiB for the socket.
      const room = await statfs(stage)
      expect(room.blocks * room.bsize).toBe(16 * MIB + 64 * 1024)
      const total = 100 * MIB
      const expected = await sha256(source(total, 7))
      const { pieces, watcher } = countPieces(stage)
      try {
        await sandbox.writeFileStream('big.bin', source(total, 7), { size: total })
        await sandbox.writeFileStream('spooled.bin', source(total, 7))
      } finally {
        watcher.close()
      }
      // 4 MiB pieces: nearly all of 200 MiB went through the stage.
      expect(pieces.size).toBeGreaterThanOrEqual(40)
      await expectStageEmpty(stage)
      for (const name of ['big.bin', 'spooled.bin']) {
        const inside = await sandbox.exec('sha256sum', [`${sandbox.rootDir}/${name}`])
        expect(inside.stdout.split(' ')[0]).toBe(expected)
        expect(await sha256(await sandbox.readFileStream(name))).toBe(expected)
      }
      // Written as the sandbox's user, as every upload is.
      const owner = await sandbox.exec('sh', ['-c', `stat -c %u ${sandbox.rootDir}/big.bin; id -u`])
      const [fileUid, userUid] = owner.stdout.trim().split('\n')
      expect(fileUid).toBe(userUid)
    } finally {
      await provider.close()
    }
  }, 180_000)

  it('a batch crosses its large host file as staged pieces, beside its small files', async () => {
    const provider = testProvider({ runtime: 'runsc', image: NODE_IMAGE }, { layout })
    const dir = await mkdtemp(join(tmpdir(), 'cordon-staged-batch-'))
    try {
      const big = join(dir, 'big.bin')
      const small = join(dir, 'small.txt')
      await pipeline(Readable.from(source(100 * MIB, 21)), createWriteStream(big))
      await writeFile(small, 'small file')
      const sandbox = await provider.create({ memoryLimitMb: 256 })
      const stage = await stageOnHost(sandbox.id)
      const { pieces, watcher } = countPieces(stage)
      try {
        await sandbox.writeFiles!([
          { path: 'batch/small.txt', hostPath: small },
          { path: 'batch/big.bin', hostPath: big },
          { path: 'batch/after.txt', hostPath: small },
        ])
      } finally {
        watcher.close()
      }
      expect(pieces.size).toBe(25)
      await expectStageEmpty(stage)
      const inside = await sandbox.exec('sh', [
        '-c',
        `cd ${sandbox.rootDir}/batch && sha256sum big.bin && cat small.txt after.txt`,
      ])
      expect(inside.stdout).toBe(
        `${await sha256(source(100 * MIB, 21))}  big.bin\nsmall filesmall file`,
      )
    } finally {
      await provider.close()
      await rm(dir, { recursive: true, force: true })
    }
  }, 180_000)

  it('uploads at once share the stage; what does not fit crosses the socket, and every file is whole', async () => {
    const provider = testProvider({ runtime: 'runsc', image: NODE_IMAGE }, { layout })
    try {
      const sandbox = await provider.create({ memoryLimitMb: 256 })
      const stage = await stageOnHost(sandbox.id)
      const total = 40 * MIB
      const seeds = [1, 2, 3, 4]
      // In hand, so that the host outpaces the agent and the stage fills.
      const contents = await Promise.all(
        seeds.map(async (seed) => {
          const chunks: Uint8Array[] = []
          for await (const chunk of source(total, seed)) chunks.push(chunk)
          return chunks
        }),
      )
      const put = vi.spyOn(HostUploadStage.prototype, 'put')
      await Promise.all(
        seeds.map((seed, index) =>
          sandbox.writeFileStream(`at-once-${seed}.bin`, inHand(contents[index]!), {
            size: total,
          }),
        ),
      )
      // Room for four pieces, and each upload keeps up to two waiting: some went over the socket.
      const outcomes = await Promise.all(put.mock.results.map((result) => result.value))
      expect(outcomes.filter((name) => name !== undefined).length).toBeGreaterThan(0)
      expect(outcomes.filter((name) => name === undefined).length).toBeGreaterThan(0)
      put.mockRestore()
      for (const seed of seeds) {
        const inside = await sandbox.exec('sha256sum', [`${sandbox.rootDir}/at-once-${seed}.bin`])
        expect(inside.stdout.split(' ')[0]).toBe(await sha256(source(total, seed)))
      }
      await expectStageEmpty(stage)
    } finally {
      await provider.close()
    }
  }, 180_000)

  it('an upload that fails part-way leaves the target as it was and nothing in the stage', async () => {
    const provider = testProvider({ runtime: 'runsc', image: NODE_IMAGE }, { layout })
    try {
      const sandbox = await provider.create({ memoryLimitMb: 256 })
      const stage = await stageOnHost(sandbox.id)
      await sandbox.writeFile('kept.txt', 'before')
      // More bytes than declared: refused once the agent counts past the size.
      await expect(
        sandbox.writeFileStream('kept.txt', source(32 * MIB, 9), { size: 20 * MIB }),
      ).rejects.toThrow(/declared/)
      // A source that breaks after 24 MiB.
      async function* broken(): AsyncGenerator<Uint8Array> {
        yield* source(24 * MIB, 10)
        throw new Error('the source broke')
      }
      await expect(sandbox.writeFileStream('kept.txt', broken())).rejects.toThrow()
      expect((await sandbox.readFile('kept.txt')).toString()).toBe('before')
      // The agent removes a piece it refused; the host, one it never sent or the agent never took.
      await expectStageEmpty(stage)
      const leftovers = await sandbox.exec('sh', [
        '-c',
        `ls -a ${sandbox.rootDir} | grep -c cordon-upload || true`,
      ])
      expect(leftovers.stdout.trim()).toBe('0')
    } finally {
      await provider.close()
    }
  }, 180_000)

  it('a staged upload larger than the outputs mount meets its size cap, and leaves neither file nor piece', async () => {
    const provider = testProvider(
      { runtime: 'runsc', image: NODE_IMAGE },
      { layout: { outputs: { source: { type: 'ephemeral', sizeMb: 24 } } } },
    )
    try {
      const sandbox = await provider.create({ memoryLimitMb: 256 })
      const stage = await stageOnHost(sandbox.id)
      const { pieces, watcher } = countPieces(stage)
      try {
        await expect(sandbox.writeFileStream('too-big.bin', source(64 * MIB, 12))).rejects.toThrow()
      } finally {
        watcher.close()
      }
      expect(pieces.size).toBeGreaterThan(0)
      const left = await sandbox.exec('sh', [
        '-c',
        `ls -a ${sandbox.rootDir}; df -k ${sandbox.rootDir} | tail -1`,
      ])
      expect(left.stdout).not.toMatch(/too-big|cordon-upload/)
      await expectStageEmpty(stage)
      // And the sandbox goes on: a file that fits still arrives whole.
      await sandbox.writeFileStream('fits.bin', source(8 * MIB, 13), { size: 8 * MIB })
      const inside = await sandbox.exec('sha256sum', [`${sandbox.rootDir}/fits.bin`])
      expect(inside.stdout.split(' ')[0]).toBe(await sha256(source(8 * MIB, 13)))
    } finally {
      await provider.close()
    }
  }, 180_000)

  it("the sandbox's user can neither read a piece nor plant one", async () => {
    const provider = testProvider({ runtime: 'runsc', image: NODE_IMAGE }, { layout })
    try {
      const sandbox = await provider.create({ memoryLimitMb: 256 })
      const stage = await stageOnHost(sandbox.id)
      const { pieces, watcher } = countPieces(stage)
      // A command that tries the stage for as long as an upload runs beside it.
      const prying = sandbox.exec('sh', [
        '-c',
        [
          'end=$(($(date +%s) + 3))',
          'while [ $(date +%s) -lt $end ]; do',
          `  ls ${HOST_SOCKET_DIR} >/dev/null 2>&1 && echo LISTED`,
          `  cat ${HOST_SOCKET_DIR}/*.upload >/dev/null 2>&1 && echo READ`,
          `  (: > ${HOST_SOCKET_DIR}/0123456789abcdef0123456789abcdef.upload) 2>/dev/null && echo PLANTED`,
          'done; echo DONE',
        ].join('\n'),
      ])
      try {
        await sandbox.writeFileStream('watched.bin', source(64 * MIB, 11), { size: 64 * MIB })
      } finally {
        watcher.close()
      }
      const result = await prying
      expect(result.stdout).toBe('DONE\n')
      expect(pieces.size).toBeGreaterThan(0)
    } finally {
      await provider.close()
    }
  }, 180_000)
})
