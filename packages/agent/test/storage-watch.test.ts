import { execFileSync, spawn } from 'node:child_process'
import { chmod, mkdir, mkdtemp, rm, truncate, writeFile } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { afterEach, describe, expect, it } from 'vitest'
import { AGENT_ENV, DEFAULT_STORAGE_CHECK_MS, readAgentConfig } from '../src/agent-config.js'
import { deletedMappings, deviceNumbers, heldDeletedFiles } from '../src/held-files.js'
import { findExcess, measureStorage, watchStorage } from '../src/storage-watch.js'
import { type ActAs, actAsItself } from '../src/user-identity.js'

const roots: string[] = []
afterEach(async () => {
  for (const root of roots.splice(0)) await rm(root, { recursive: true, force: true })
})

async function directory(): Promise<string> {
  const root = await mkdtemp(join(tmpdir(), 'cordon-storage-'))
  roots.push(root)
  return root
}

describe('measuring a capped directory', () => {
  it('counts the blocks files take, and at least 4 KiB for every entry, empty files and directories too', async () => {
    const root = await directory()
    await writeFile(join(root, 'data'), Buffer.alloc(100_000))
    await mkdir(join(root, 'nested'))
    for (let index = 0; index < 10; index++) await writeFile(join(root, 'nested', `${index}`), '')
    // 100,000 bytes take 25 blocks of 4 KiB on this filesystem.
    expect(await measureStorage(root, actAsItself)).toBe(102_400 + 4096 + 10 * 4096)
  })

  it('counts a sparse file by the size it claims, and stops early once past a bound', async () => {
    const root = await directory()
    await writeFile(join(root, 'sparse'), '')
    await truncate(join(root, 'sparse'), 64 * 1024 * 1024)
    expect(await measureStorage(root, actAsItself)).toBe(64 * 1024 * 1024)
    for (let index = 0; index < 5000; index++) await writeFile(join(root, `f${index}`), '')
    const whole = await measureStorage(root, actAsItself)
    expect(whole).toBe(64 * 1024 * 1024 + 5000 * 4096)
    // The walk gives up as soon as it knows the answer.
    const early = await measureStorage(root, actAsItself, 1024)
    expect(early).toBeGreaterThan(1024)
    expect(early).toBeLessThan(whole)
  })

  it('counts the blocks allocated past a file size, and every entry of a directory the sandbox made unreadable', async () => {
    const root = await directory()
    // fallocate --keep-size: size 0, 8 MiB of blocks.
    await writeFile(join(root, 'reserved'), '')
    execFileSync('fallocate', ['--keep-size', '--length', '8MiB', join(root, 'reserved')])
    await mkdir(join(root, 'hidden'))
    await writeFile(join(root, 'hidden', 'inside'), Buffer.alloc(50_000))
    await chmod(join(root, 'hidden'), 0o300)
    // This test runs as root, as the agent does: it reads the directory whatever its modes.
    expect(await measureStorage(root, actAsItself)).toBe(8 * 1024 * 1024 + 4096 + 53_248)
  })

  it('counts what a process holds open after deleting it, and a deleted file held only by a mapping as unmeasured', async () => {
    const root = await directory()
    const holder = spawn(
      process.execPath,
      [
        '-e',
        `const fs = require('node:fs')
         const fd = fs.openSync(process.argv[1] + '/open', 'w')
         fs.writeSync(fd, Buffer.alloc(3 * 1024 * 1024))
         fs.unlinkSync(process.argv[1] + '/open')
         process.stdout.write('ready\\n')
         setInterval(() => {}, 1000)`,
        root,
      ],
      { stdio: ['ignore', 'pipe', 'inherit'] },
    )
    try {
      await new Promise((resolve) => holder.stdout!.once('data', resolve))
      expect(await measureStorage(root, actAsItself)).toBe(0)
      const held = heldDeletedFiles(process.getuid!(), [root])
      expect(held.get(root)).toEqual({ bytes: 3 * 1024 * 1024, unmeasured: 0 })
      expect(
        await findExcess([{ root, bytes: 1024 * 1024 }], actAsItself, process.getuid!()),
      ).toEqual({ root, usedBytes: 3 * 1024 * 1024, capBytes: 1024 * 1024 })
    } finally {
      holder.kill('SIGKILL')
    }
  })

  it('reads deleted mappings from a maps file, and device numbers as the maps file writes them', () => {
    const maps = [
      '7f3507ade000-7f3507adf000 rw-s 00000000 fe:00 2146324                    /out/mm (deleted)',
      '7f3507adf000-7f3507ae0000 rw-s 00000000 fe:00 2146325                    /out/name with spaces (deleted)',
      '7f3507ae0000-7f3507ae1000 rw-p 00000000 00:00 0 ',
      '7f3507ae1000-7f3507ae2000 r--p 00000000 fe:00 77                         /out/kept',
    ].join('\n')
    expect(deletedMappings(maps)).toEqual([
      { device: '254:0', inode: '2146324', path: '/out/mm' },
      { device: '254:0', inode: '2146325', path: '/out/name with spaces' },
    ])
    expect(deviceNumbers(0xfe00)).toBe('254:0')
    expect(deviceNumbers(0x10300)).toBe('259:0') // glibc: major above 255 spills into bits 8-19 and 32+
  })

  it('names the first directory past its cap, and nothing for one exactly at it', async () => {
    const root = await directory()
    await writeFile(join(root, 'file'), Buffer.alloc(8192))
    expect(await findExcess([{ root, bytes: 8192 }], actAsItself)).toBeUndefined()
    expect(await findExcess([{ root, bytes: 8191 }], actAsItself)).toEqual({
      root,
      usedBytes: 8192,
      capBytes: 8191,
    })
  })
})

describe('watching the caps', () => {
  it('pauses at least four times as long as a walk took, so a slow tree is not walked back to back', async () => {
    const root = await directory()
    await writeFile(join(root, 'file'), 'x')
    const walks: { start: number; end: number }[] = []
    // Each walk of this one-slice tree takes at least 200 ms, as a large tree
    // would: long next to the rest of a round (the scan of the user's open
    // files, slow on a loaded host), so a shorter pause would show.
    const slowActAs: ActAs = (operation) => {
      const start = performance.now()
      while (performance.now() < start + 200) {}
      const result = operation()
      walks.push({ start, end: performance.now() })
      return result
    }
    const watch = watchStorage({
      caps: [{ root, bytes: 1024 * 1024 }],
      actAs: slowActAs,
      // This test's own uid: it has a process, so the watch keeps measuring.
      uid: process.getuid!(),
      intervalMs: 10,
      onExceeded: () => {},
    })
    // Counted in walks, not in a window of time: a loaded host (load 40 in a
    // CI run) starts the first walk late, and fewer fit in any window.
    for (let waited = 0; walks.length < 4 && waited < 20_000; waited += 20)
      await new Promise((resolve) => setTimeout(resolve, 20))
    watch.stop()
    expect(walks.length).toBeGreaterThanOrEqual(4)
    // Back to back, the next walk would start 10 ms after one ends; each
    // waits at least four times the walk before it (the watch's own
    // measure of a walk includes this one; 2 ms for timers' rounding).
    for (let index = 1; index < walks.length; index++) {
      const before = walks[index - 1]!
      expect(walks[index]!.start - before.end).toBeGreaterThanOrEqual(
        4 * (before.end - before.start) - 2,
      )
    }
  })

  it('calls onExceeded once a capped directory passes its cap', async () => {
    const root = await directory()
    let excess: unknown
    const watch = watchStorage({
      caps: [{ root, bytes: 8192 }],
      actAs: actAsItself,
      uid: process.getuid!(),
      intervalMs: 10,
      onExceeded: (found) => {
        excess = found
      },
    })
    await writeFile(join(root, 'big'), Buffer.alloc(10_000))
    for (let waited = 0; excess === undefined && waited < 2_000; waited += 20)
      await new Promise((resolve) => setTimeout(resolve, 20))
    watch.stop()
    // 10,000 bytes take three blocks of 4 KiB.
    expect(excess).toEqual({ root, usedBytes: 12_288, capBytes: 8192 })
  })
})

describe('the storage cap settings', () => {
  const base = {
    [AGENT_ENV.listen]: 'stdio',
    [AGENT_ENV.secretStdin]: '1',
    [AGENT_ENV.runAs]: '1000:1000',
    [AGENT_ENV.quiet]: '1',
  }

  it('reads root=bytes pairs (a root may hold "=") and the check interval', () => {
    const config = readAgentConfig({
      ...base,
      [AGENT_ENV.storageCaps]: '/out/=1048576:/odd=name=42',
      [AGENT_ENV.storageCheckMs]: '250',
    })
    expect(config.storageCaps).toEqual([
      { root: '/out', bytes: 1_048_576 },
      { root: '/odd=name', bytes: 42 },
    ])
    expect(config.storageCheckMs).toBe(250)
    expect(readAgentConfig({ ...base }).storageCheckMs).toBe(DEFAULT_STORAGE_CHECK_MS)
  })

  it('refuses malformed caps, and caps without a user to measure as', () => {
    expect(() => readAgentConfig({ ...base, [AGENT_ENV.storageCaps]: 'relative=5' })).toThrow(
      /CORDON_AGENT_STORAGE_CAPS/,
    )
    expect(() => readAgentConfig({ ...base, [AGENT_ENV.storageCaps]: '/out=-1' })).toThrow(
      /CORDON_AGENT_STORAGE_CAPS/,
    )
    const { [AGENT_ENV.runAs]: _, ...withoutUser } = base
    expect(() => readAgentConfig({ ...withoutUser, [AGENT_ENV.storageCaps]: '/out=5' })).toThrow(
      /needs CORDON_AGENT_RUN_AS/,
    )
  })
})
