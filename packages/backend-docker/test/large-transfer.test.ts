import { describe, expect, it } from 'vitest'
import { deterministicBytes, digestOf } from './deterministic-bytes.js'
import { testProvider } from './test-run.js'

const MIB = 1024 * 1024
const source = deterministicBytes
const sha256 = digestOf

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
