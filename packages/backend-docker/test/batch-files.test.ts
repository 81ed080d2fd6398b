import { execFileSync } from 'node:child_process'
import { createHash, randomBytes } from 'node:crypto'
import { appendFileSync, chmodSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { type SandboxEvent, SandboxHostFileError, SandboxPathError } from '@cordon/core'
import { afterAll, describe, expect, it } from 'vitest'
import { testProvider } from './test-run.js'

const hostDir = mkdtempSync(join(tmpdir(), 'cordon-host-files-'))
afterAll(() => rmSync(hostDir, { recursive: true, force: true }))

/** Writes a host file under the test's directory and returns its path. */
function hostFile(name: string, content: string | Uint8Array, mode = 0o644): string {
  const path = join(hostDir, name)
  mkdirSync(join(path, '..'), { recursive: true })
  writeFileSync(path, content)
  chmodSync(path, mode)
  return path
}

describe('batch file transfer (writeFiles / readFiles)', () => {
  it.each(['docker', 'runsc'] as const)(
    'writes 2,000 files in one call and reads them back in one call (%s)',
    async (runtime) => {
      const provider = testProvider({ runtime })
      try {
        const sandbox = await provider.create()
        const files = Array.from({ length: 2000 }, (_, index) => ({
          path: `tree/d${index % 20}/f${index}.txt`,
          content: `file ${index}\n`.repeat((index % 7) + 1),
        }))
        await sandbox.writeFiles!(files)
        const read = new Map<string, string>()
        for await (const file of await sandbox.readFiles!('tree')) {
          read.set(file.path, new TextDecoder().decode(file.content))
        }
        expect(read.size).toBe(2000)
        for (const file of files)
          expect(read.get(`${sandbox.rootDir}/${file.path}`)).toBe(file.content)
        // Owned by the sandbox user, so the sandbox can change them.
        const inside = await sandbox.exec('sh', [
          '-c',
          'echo more >> tree/d3/f3.txt && id -u && stat -c %u tree tree/d3 tree/d3/f3.txt',
        ])
        expect(inside.exitCode).toBe(0)
        const [uid, ...owners] = inside.stdout.trim().split('\n')
        expect(owners).toEqual([uid, uid, uid])
      } finally {
        await provider.close()
      }
    },
  )

  it.each(['docker', 'runsc'] as const)(
    'a directory the sandbox swaps for a link to the outside after the listing yields what was listed, nothing of the outside (%s)',
    async (runtime) => {
      const provider = testProvider({ runtime })
      try {
        const sandbox = await provider.create()
        // Named as files that exist outside the roots, readable by the sandbox's
        // user, and too large to be read while listing (the agent's
        // file-prefetch.ts): they are read after the swap, where the listing
        // walked. The small one was read while listing.
        const mine = 'mine'.padEnd(70 * 1024, '.')
        await sandbox.writeFiles!([
          { path: 'swap/a/passwd', content: mine },
          { path: 'swap/a/group', content: mine },
          { path: 'swap/b/kept', content: 'kept' },
        ])
        const listed = await sandbox.readFiles!('swap')
        const swapped = await sandbox.exec('sh', ['-c', 'mv swap/a moved && ln -s /etc swap/a'])
        expect(swapped.exitCode, swapped.stderr).toBe(0)
        const read = new Map<string, string>()
        for await (const file of listed) read.set(file.path, new TextDecoder().decode(file.content))
        // Read in the directory the listing walked (moved, not followed): the files it listed.
        expect(Object.fromEntries(read)).toEqual({
          [`${sandbox.rootDir}/swap/a/passwd`]: mine,
          [`${sandbox.rootDir}/swap/a/group`]: mine,
          [`${sandbox.rootDir}/swap/b/kept`]: 'kept',
        })
      } finally {
        await provider.close()
      }
    },
  )

  it('refuses a path outside the writable mounts before writing anything, and yields nothing for a missing directory', async () => {
    const provider = testProvider()
    try {
      const sandbox = await provider.create()
      await expect(
        sandbox.writeFiles!([
          { path: 'fine.txt', content: 'x' },
          { path: '/etc/passwd', content: 'x' },
        ]),
      ).rejects.toSatisfy((error) => SandboxPathError.isInstance(error))
      expect(await sandbox.listFiles()).toEqual([])
      const none: unknown[] = []
      for await (const file of await sandbox.readFiles!('missing')) none.push(file)
      expect(none).toEqual([])
    } finally {
      await provider.close()
    }
  })

  it('copies host files as the batch is sent: their bytes and modes, a large one in pieces, and the event counts them', async () => {
    const events: SandboxEvent[] = []
    const provider = testProvider({}, { onEvent: (event) => events.push(event) })
    try {
      const sandbox = await provider.create()
      const big = randomBytes(3 * 1024 * 1024 + 17)
      const scriptText = '#!/bin/sh\necho ran from the host\n'
      const secretText = 'only the owner\n'
      const script = hostFile('tree/run.sh', scriptText, 0o755)
      const secret = hostFile('tree/data/secret.txt', secretText, 0o600)
      const bigPath = hostFile('tree/big.bin', big)
      const empty = hostFile('tree/empty', '')
      const report = await sandbox.writeFiles!([
        { path: 'up/run.sh', hostPath: script },
        { path: 'up/data/secret.txt', hostPath: secret },
        { path: 'up/big.bin', hostPath: bigPath },
        { path: 'up/empty', hostPath: empty },
        { path: 'up/given-mode.txt', hostPath: secret, mode: 0o640 },
        { path: 'up/inline.txt', content: 'in hand' },
      ])
      const bytes = scriptText.length + 2 * secretText.length + big.byteLength + 'in hand'.length
      expect(report).toEqual({ files: 6, bytes })
      const inside = await sandbox.exec('sh', [
        '-c',
        'cd up && ./run.sh && stat -c "%n %a %s" run.sh data/secret.txt big.bin empty given-mode.txt inline.txt && sha256sum big.bin && cat data/secret.txt inline.txt',
      ])
      expect(inside.stderr).toBe('')
      expect(inside.stdout.split('\n')).toEqual([
        'ran from the host',
        `run.sh 755 ${scriptText.length}`,
        `data/secret.txt 600 ${secretText.length}`,
        `big.bin 644 ${big.byteLength}`,
        'empty 644 0',
        `given-mode.txt 640 ${secretText.length}`,
        'inline.txt 644 7',
        `${createHash('sha256').update(big).digest('hex')}  big.bin`,
        'only the owner',
        'in hand',
      ])
      const written = events.find(
        (event) =>
          event.type === 'file' && (event as { operation?: string }).operation === 'write-batch',
      ) as { bytes?: number; files?: number } | undefined
      expect(written).toMatchObject({ bytes, files: 6 })
    } finally {
      await provider.close()
    }
  })

  it('refuses a missing or irregular host file before writing anything', async () => {
    const provider = testProvider()
    try {
      const sandbox = await provider.create()
      const fine = hostFile('refused/fine.txt', 'fine')
      const fifo = join(hostDir, 'refused/fifo')
      execFileSync('mkfifo', [fifo])
      const cases: Array<[string, string]> = [
        [join(hostDir, 'refused/missing.txt'), 'no such file'],
        [join(hostDir, 'refused'), 'it is a directory'],
        [fifo, 'it is not a regular file'],
        [join(fine, 'below'), 'a part of its path is not a directory'],
      ]
      for (const [hostPath, reason] of cases) {
        const refused = await sandbox.writeFiles!([
          { path: 'first.txt', hostPath: fine },
          { path: 'second.txt', content: 'x' },
          { path: 'bad', hostPath },
        ]).then(
          () => undefined,
          (error: unknown) => error,
        )
        expect(SandboxHostFileError.isInstance(refused), String(refused)).toBe(true)
        expect(refused).toMatchObject({ hostPath, reason, code: 'HOST_FILE_UNUSABLE' })
      }
      expect(await sandbox.listFiles()).toEqual([])
    } finally {
      await provider.close()
    }
  })

  it('fails the batch, without the file, when a host file changes size after it was checked', async () => {
    const provider = testProvider()
    try {
      const sandbox = await provider.create()
      for (const [name, size] of [
        ['grows-small.txt', 100],
        ['grows-large.bin', 2 * 1024 * 1024],
      ] as const) {
        const hostPath = hostFile(`changing/${name}`, Buffer.alloc(size, 97))
        // The check runs when writeFiles is called; the read comes later, once the batch is sent.
        const pending = sandbox.writeFiles!([{ path: `changed/${name}`, hostPath }])
        appendFileSync(hostPath, 'more')
        await expect(pending).rejects.toSatisfy(
          (error) => SandboxHostFileError.isInstance(error) && /size changed/.test(error.reason),
        )
        const there = await sandbox.exec('sh', [
          '-c',
          `test -e changed/${name} && echo there || echo absent`,
        ])
        expect(there.stdout.trim()).toBe('absent')
      }
    } finally {
      await provider.close()
    }
  })

  it("reports the agent's refusal of a file in the middle of a batch, not the connection it ended", async () => {
    const provider = testProvider()
    try {
      const sandbox = await provider.create()
      // The sandbox's own link out of its workspace: only the agent, resolving it, can refuse it.
      expect((await sandbox.exec('ln', ['-s', '/etc', 'escape'])).exitCode).toBe(0)
      const around = (side: string) =>
        Array.from({ length: 300 }, (_, index) => ({
          path: `${side}/f${index}.txt`,
          content: `${side} ${index}\n`.repeat(50),
        }))
      const refused = await sandbox.writeFiles!([
        ...around('before'),
        { path: 'escape/passwd-2', content: 'x' },
        ...around('after'),
      ]).then(
        () => undefined,
        (error: unknown) => error,
      )
      expect(SandboxPathError.isInstance(refused), String(refused)).toBe(true)
      const outside = await sandbox.exec('sh', [
        '-c',
        'test -e /etc/passwd-2 && echo there || echo absent',
      ])
      expect(outside.stdout.trim()).toBe('absent')
    } finally {
      await provider.close()
    }
  })

  it('holds a few pieces of a batch of large host files in host memory, never the batch', async () => {
    const provider = testProvider()
    try {
      const sandbox = await provider.create()
      const piece = randomBytes(1024 * 1024)
      const names = ['a', 'b', 'c', 'd'].map((name) => {
        const path = join(hostDir, `large/${name}.bin`)
        mkdirSync(join(hostDir, 'large'), { recursive: true })
        writeFileSync(path, '')
        for (let mib = 0; mib < 48; mib++) appendFileSync(path, piece)
        return path
      })
      // 192 MiB of host files: held whole, the batch would add that much. Pieces
      // already sent count until V8 collects them, hence a bound of a third of it.
      const before = process.memoryUsage().arrayBuffers
      let peak = before
      const sampler = setInterval(() => {
        peak = Math.max(peak, process.memoryUsage().arrayBuffers)
      }, 2)
      try {
        const report = await sandbox.writeFiles!(
          names.map((hostPath, index) => ({ path: `large/${index}.bin`, hostPath })),
        )
        expect(report).toEqual({ files: 4, bytes: 192 * 1024 * 1024 })
      } finally {
        clearInterval(sampler)
      }
      expect((peak - before) / (1024 * 1024)).toBeLessThan(64)
      const sizes = await sandbox.exec('sh', ['-c', 'wc -c < large/0.bin; wc -c < large/3.bin'])
      expect(sizes.stdout.trim().split('\n')).toEqual(['50331648', '50331648'])
    } finally {
      await provider.close()
    }
  })
})
