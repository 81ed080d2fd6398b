import { mkdtemp, rm, writeFile } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import {
  EXEC_GROUP_COUNT,
  EXEC_GROUP_FIRST,
  execGroupOf,
  execGroupsMapped,
  randomExecGroupOffset,
} from '../src/exec-group.js'

describe('exec tags: supplementary groups of one exec each', () => {
  let dir: string
  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), 'cordon-exec-group-'))
  })
  afterAll(async () => {
    await rm(dir, { recursive: true, force: true })
  })

  async function map(text: string): Promise<string> {
    const path = join(dir, `gid_map-${Math.random().toString(36).slice(2)}`)
    await writeFile(path, text)
    return path
  }

  it('tags from 2^31 up, above the uids cordon gives sandbox users, never 2^32 - 1', () => {
    expect(execGroupOf(1)).toBe(2 ** 31 + 1)
    expect(execGroupOf(EXEC_GROUP_COUNT + 7)).toBe(EXEC_GROUP_FIRST + 7)
    expect(EXEC_GROUP_FIRST + EXEC_GROUP_COUNT - 1).toBeLessThan(2 ** 32 - 1)
    expect(execGroupOf(5, EXEC_GROUP_COUNT - 2)).toBe(EXEC_GROUP_FIRST + 3)
  })

  it('draws each launcher its own starting point in the range', () => {
    const offsets = new Set(Array.from({ length: 20 }, () => randomExecGroupOffset()))
    for (const offset of offsets) {
      expect(offset).toBeGreaterThanOrEqual(0)
      expect(offset).toBeLessThan(EXEC_GROUP_COUNT)
    }
    expect(offsets.size).toBeGreaterThan(1)
  })

  it('tags commands only where the user namespace maps the whole range', async () => {
    // The initial namespace (and a Docker container without remapping).
    expect(execGroupsMapped(await map('         0          0 4294967295\n'))).toBe(true)
    // An engine with user-namespace remapping: 65536 ids.
    expect(execGroupsMapped(await map('         0     100000      65536\n'))).toBe(false)
    // Two extents, one of them holding the whole range.
    expect(
      execGroupsMapped(
        await map(`0 100000 65536\n${EXEC_GROUP_FIRST} 200000 ${EXEC_GROUP_COUNT}\n`),
      ),
    ).toBe(true)
    // Part of the range only.
    expect(execGroupsMapped(await map(`0 0 ${EXEC_GROUP_FIRST + 10}\n`))).toBe(false)
    expect(execGroupsMapped(join(dir, 'missing'))).toBe(false)
  })
})
