import { createHash } from 'node:crypto'
import { describe, expect, it } from 'vitest'
import { testProvider } from './test-run.js'

const MIB = 1024 * 1024

/** 100 MiB of deterministic bytes, produced chunk by chunk, never all at once. */
async function* source(total: number, seed: number): AsyncGenerator<Uint8Array> {
  let state = seed
  for (let sent = 0; sent < total; sent += MIB) {
    const chunk = new Uint8Array(Math.min(MIB, total - sent))
    for (let i = 0; i < chunk.length; i += 4) {
      state = (state * 1664525 + 1013904223) >>> 0
      chunk[i] = state & 0xff
      chunk[i + 1] = (state >>> 8) & 0xff
      chunk[i + 2] = (state >>> 16) & 0xff
      chunk[i + 3] = state >>> 24
    }
    yield chunk
  }
}

async function sha256(chunks: AsyncIterable<Uint8Array>): Promise<{ hash: string; bytes: number }> {
  const hash = createHash('sha256')
  let bytes = 0
  for await (const chunk of chunks) {
    hash.update(chunk)
    bytes += chunk.byteLength
  }
  return { hash: hash.digest('hex'), bytes }
}

describe('streamed transfer of a 100 MiB file', () => {
  it('moves 100 MiB in and out byte-exact, with and without a declared size', async () => {
    const provider = testProvider(
      {},
      { layout: { outputs: { source: { type: 'ephemeral', sizeMb: 320 } } } },
    )
    try {
      const sandbox = await provider.create({ memoryLimitMb: 256 })
      const total = 100 * MIB
      const expected = await sha256(source(total, 42))
      await sandbox.writeFileStream('big/declared.bin', source(total, 42), { size: total })
      await sandbox.writeFileStream('big/spooled.bin', source(total, 42))
      for (const name of ['declared', 'spooled']) {
        expect(await sha256(await sandbox.readFileStream(`big/${name}.bin`))).toEqual(expected)
      }
      const inside = await sandbox.exec('sha256sum', [`${sandbox.rootDir}/big/declared.bin`])
      expect(inside.stdout.split(' ')[0]).toBe(expected.hash)
    } finally {
      await provider.close()
    }
  }, 180_000)
})
