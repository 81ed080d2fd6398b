import { randomBytes } from 'node:crypto'
import { chmodSync, mkdtempSync, rmSync, truncateSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { SandboxHostFileError } from '@cordon/core'
import { afterAll, describe, expect, it } from 'vitest'
import { checkHostFile } from '../src/sandbox/host-file-source.js'

/** A batch's host file sources, read as the batch sends them (no sandbox needed). */

const dir = mkdtempSync(join(tmpdir(), 'cordon-host-source-'))
afterAll(() => rmSync(dir, { recursive: true, force: true }))

async function collect(pieces: AsyncIterable<Uint8Array>): Promise<Uint8Array[]> {
  const all: Uint8Array[] = []
  for await (const piece of pieces) all.push(piece)
  return all
}

describe('host file sources of a batch write', () => {
  it('gives a small file whole and a large one in pieces of at most 1 MiB, with its mode', async () => {
    const small = join(dir, 'small')
    const large = join(dir, 'large')
    const largeBytes = randomBytes(2 * 1024 * 1024 + 5)
    writeFileSync(small, 'small bytes')
    writeFileSync(large, largeBytes)
    chmodSync(small, 0o4755)
    const smallSource = checkHostFile(small)
    expect(smallSource).toMatchObject({ size: 11, mode: 0o755 })
    expect(Buffer.concat(await collect(smallSource.pieces())).toString()).toBe('small bytes')
    const pieces = await collect(checkHostFile(large).pieces())
    expect(pieces.map((piece) => piece.byteLength)).toEqual([1024 * 1024, 1024 * 1024, 5])
    expect(Buffer.concat(pieces).equals(largeBytes)).toBe(true)
  })

  it('refuses a large file that shrinks or grows while its pieces are read', async () => {
    for (const change of ['shrink', 'grow'] as const) {
      const path = join(dir, `changing-${change}`)
      writeFileSync(path, randomBytes(3 * 1024 * 1024))
      const pieces = checkHostFile(path).pieces()[Symbol.asyncIterator]()
      expect((await pieces.next()).value?.byteLength).toBe(1024 * 1024)
      if (change === 'shrink') truncateSync(path, 1024 * 1024 + 10)
      else writeFileSync(path, randomBytes(16), { flag: 'a' })
      const failure = await (async () => {
        for (;;) if ((await pieces.next()).done) return undefined
      })().catch((error: unknown) => error)
      expect(SandboxHostFileError.isInstance(failure), `${change}: ${String(failure)}`).toBe(true)
      expect((failure as SandboxHostFileError).reason).toMatch(/size changed/)
    }
  })

  it('refuses a small file whose size changed since the check', async () => {
    const path = join(dir, 'small-changing')
    writeFileSync(path, 'four')
    const source = checkHostFile(path)
    writeFileSync(path, 'five!')
    await expect(collect(source.pieces())).rejects.toSatisfy(
      (error) => SandboxHostFileError.isInstance(error) && /size changed/.test(error.reason),
    )
  })
})
