import { createHash, randomBytes } from 'node:crypto'
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import {
  SandboxConfigValidationError,
  SandboxFileNotFoundError,
  SandboxFileTooLargeError,
  SandboxHostFileError,
  SandboxPathError,
} from '@cordon/core'
import { describe, expect, it } from 'vitest'
import type { SandboxesUnderTest } from './shared-sandbox.js'
import type { SandboxConformanceOptions } from './suite-options.js'

async function* chunked(
  total: number,
  chunkSize: number,
  seed: number,
): AsyncGenerator<Uint8Array> {
  let sent = 0
  let counter = seed
  while (sent < total) {
    const size = Math.min(chunkSize, total - sent)
    const chunk = new Uint8Array(size)
    for (let i = 0; i < size; i++) {
      counter = (counter * 1103515245 + 12345) >>> 0
      chunk[i] = counter >>> 24
    }
    sent += size
    yield chunk
  }
}

async function digestOf(
  source: AsyncIterable<Uint8Array>,
): Promise<{ sha256: string; bytes: number }> {
  const hash = createHash('sha256')
  let bytes = 0
  for await (const chunk of source) {
    hash.update(chunk)
    bytes += chunk.byteLength
  }
  return { sha256: hash.digest('hex'), bytes }
}

export function fileCases(options: SandboxConformanceOptions, sandboxes: SandboxesUnderTest): void {
  const timeout = options.timeoutMs ?? 60_000

  describe('files', () => {
    it(
      'round-trips every byte value exactly',
      async () => {
        const bytes = new Uint8Array(256 * 4)
        for (let i = 0; i < bytes.length; i++) bytes[i] = i % 256
        const random = randomBytes(256 * 1024)
        const path = `${sandboxes.sandbox.rootDir}/binary.bin`
        await sandboxes.sandbox.writeFile(path, bytes)
        expect(Buffer.from(await sandboxes.sandbox.readFile(path)).equals(Buffer.from(bytes))).toBe(
          true,
        )
        await sandboxes.sandbox.writeFile('random.bin', random)
        expect(Buffer.from(await sandboxes.sandbox.readFile('random.bin')).equals(random)).toBe(
          true,
        )
      },
      timeout,
    )

    it(
      "reads into a Buffer, as the reference's hosts expect (toString('utf8') gives the text)",
      async () => {
        await sandboxes.sandbox.writeFile('text.txt', Buffer.from('# héllo\n'))
        const read = await sandboxes.sandbox.readFile('text.txt')
        expect(Buffer.isBuffer(read)).toBe(true)
        expect(read.toString('utf8')).toBe('# héllo\n')
      },
      timeout,
    )

    it(
      'writes text as UTF-8 and the command inside sees it',
      async () => {
        await sandboxes.sandbox.writeFile('notes/hello.txt', 'grüße 👋\n')
        const cat = await sandboxes.sandbox.exec('cat', [
          `${sandboxes.sandbox.rootDir}/notes/hello.txt`,
        ])
        expect(cat.stdout).toBe('grüße 👋\n')
      },
      timeout,
    )

    it(
      'reads what a command wrote',
      async () => {
        await sandboxes.sandbox.exec('sh', [
          '-c',
          'mkdir -p made && printf "from inside" > made/by-command.txt',
        ])
        const text = new TextDecoder().decode(
          await sandboxes.sandbox.readFile('made/by-command.txt'),
        )
        expect(text).toBe('from inside')
      },
      timeout,
    )

    it(
      'overwrites an existing file and applies the mode',
      async () => {
        await sandboxes.sandbox.writeFile('over.txt', 'first version, longer')
        await sandboxes.sandbox.writeFile('over.txt', 'second', { mode: 0o600 })
        expect(new TextDecoder().decode(await sandboxes.sandbox.readFile('over.txt'))).toBe(
          'second',
        )
        const stat = await sandboxes.sandbox.exec('stat', [
          '-c',
          '%a',
          `${sandboxes.sandbox.rootDir}/over.txt`,
        ])
        expect(stat.stdout.trim()).toBe('600')
      },
      timeout,
    )

    it(
      'reports a missing file with SandboxFileNotFoundError',
      async () => {
        const error = await sandboxes.sandbox
          .readFile('does/not/exist.txt')
          .catch((caught: unknown) => caught)
        expect(SandboxFileNotFoundError.isInstance(error)).toBe(true)
        // A directory is not a missing file: the error says what the path is.
        await sandboxes.sandbox.writeFile('a-directory/inside.txt', 'x')
        const directory = await sandboxes.sandbox
          .readFile('a-directory')
          .catch((caught: unknown) => caught)
        expect(SandboxFileNotFoundError.isInstance(directory)).toBe(true)
        expect((directory as Error).message).toMatch(/is a directory/)
      },
      timeout,
    )

    it(
      'lists regular files recursively with absolute paths and sizes',
      async () => {
        await sandboxes.sandbox.writeFile('tree/a.txt', 'aaa')
        await sandboxes.sandbox.writeFile('tree/sub/b.txt', 'bbbbb')
        await sandboxes.sandbox.exec('sh', [
          '-c',
          `cd ${sandboxes.sandbox.rootDir}/tree && mkdir -p empty && ln -sf a.txt link`,
        ])
        const entries = await sandboxes.sandbox.listFiles(`${sandboxes.sandbox.rootDir}/tree`)
        const simplified = entries.map((entry) => [entry.path, entry.size]).sort()
        expect(simplified).toEqual([
          [`${sandboxes.sandbox.rootDir}/tree/a.txt`, 3],
          [`${sandboxes.sandbox.rootDir}/tree/sub/b.txt`, 5],
        ])
        expect(entries.every((entry) => (entry.modifiedMs ?? 0) > 0)).toBe(true)
      },
      timeout,
    )

    it(
      'lists rootDir by default and returns [] for a missing directory',
      async () => {
        const all = await sandboxes.sandbox.listFiles()
        expect(all.some((entry) => entry.path === `${sandboxes.sandbox.rootDir}/tree/a.txt`)).toBe(
          true,
        )
        expect(
          await sandboxes.sandbox.listFiles(`${sandboxes.sandbox.rootDir}/nothing-here`),
        ).toEqual([])
      },
      timeout,
    )

    it(
      'refuses paths outside the writable roots with SandboxPathError',
      async () => {
        const attempts = [
          '/etc/passwd',
          `${sandboxes.sandbox.rootDir}/../../../etc/evil`,
          '/bin/sh',
          '../escape.txt',
        ]
        for (const path of attempts) {
          const error = await sandboxes.sandbox
            .writeFile(path, 'x')
            .catch((caught: unknown) => caught)
          expect(SandboxPathError.isInstance(error), path).toBe(true)
        }
        const inside = await sandboxes.sandbox.exec('cat', ['/etc/passwd'])
        expect(inside.stdout).not.toContain('x\n')
      },
      timeout,
    )

    it(
      'streams a large file in and out intact',
      async () => {
        const total = 24 * 1024 * 1024
        const expected = await digestOf(chunked(total, 64 * 1024, 7))
        await sandboxes.sandbox.writeFileStream('big/stream.bin', chunked(total, 64 * 1024, 7))
        const back = await digestOf(await sandboxes.sandbox.readFileStream('big/stream.bin'))
        expect(back).toEqual(expected)
        const wc = await sandboxes.sandbox.exec('wc', [
          '-c',
          `${sandboxes.sandbox.rootDir}/big/stream.bin`,
        ])
        expect(wc.stdout.trim().split(/\s+/)[0]).toBe(String(total))
      },
      timeout,
    )

    it(
      'refuses a whole-file read larger than maxBytes before reading it',
      async () => {
        const sandbox = sandboxes.sandbox
        await sandbox.exec(
          'sh',
          ['-c', 'mkdir -p big && head -c 3000000 /dev/zero > big/three-mb.bin'],
          { cwd: sandbox.rootDir },
        )
        const error = await sandbox
          .readFile('big/three-mb.bin', { maxBytes: 1024 * 1024 })
          .catch((caught: unknown) => caught)
        expect(SandboxFileTooLargeError.isInstance(error)).toBe(true)
        expect(error).toMatchObject({
          code: 'FILE_TOO_LARGE',
          size: 3_000_000,
          maxBytes: 1024 * 1024,
        })
        // The same file within the cap, and streamed whatever its size.
        expect((await sandbox.readFile('big/three-mb.bin', { maxBytes: 3_000_000 })).length).toBe(
          3_000_000,
        )
        expect((await digestOf(await sandbox.readFileStream('big/three-mb.bin'))).bytes).toBe(
          3_000_000,
        )
        if (sandbox.readFiles) {
          const batch = await sandbox
            .readFiles('big', { maxBytes: 1024 * 1024 })
            .catch((caught: unknown) => caught)
          expect(SandboxFileTooLargeError.isInstance(batch)).toBe(true)
        }
        // Nothing was left behind by the refused reads: the sandbox still answers.
        expect((await sandbox.exec('echo', ['ok'])).stdout).toBe('ok\n')
      },
      timeout,
    )

    it(
      'copies host files named in a batch write, with their modes, and refuses a missing one before writing',
      async () => {
        const sandbox = sandboxes.sandbox
        if (!sandbox.writeFiles) return
        const hostDir = mkdtempSync(join(tmpdir(), 'cordon-conformance-host-'))
        try {
          const big = randomBytes(1536 * 1024)
          writeFileSync(join(hostDir, 'tool.sh'), '#!/bin/sh\necho tool ran\n', { mode: 0o750 })
          writeFileSync(join(hostDir, 'big.bin'), big)
          await sandbox.writeFiles([
            { path: 'from-host/tool.sh', hostPath: join(hostDir, 'tool.sh') },
            { path: 'from-host/big.bin', hostPath: join(hostDir, 'big.bin') },
          ])
          const inside = await sandbox.exec(
            'sh',
            [
              '-c',
              'sh from-host/tool.sh && stat -c %a from-host/tool.sh && wc -c < from-host/big.bin',
            ],
            { cwd: sandbox.rootDir },
          )
          expect(inside.stderr).toBe('')
          expect(inside.stdout.split('\n')).toEqual(['tool ran', '750', String(big.byteLength), ''])
          expect(
            createHash('sha256')
              .update(await sandbox.readFile('from-host/big.bin'))
              .digest('hex'),
          ).toBe(createHash('sha256').update(big).digest('hex'))
          const missing = join(hostDir, 'missing.txt')
          const refused = await sandbox
            .writeFiles([
              { path: 'refused/first.txt', content: 'first' },
              { path: 'refused/missing.txt', hostPath: missing },
            ])
            .catch((caught: unknown) => caught)
          expect(SandboxHostFileError.isInstance(refused)).toBe(true)
          expect(refused).toMatchObject({ code: 'HOST_FILE_UNUSABLE', hostPath: missing })
          const first = await sandbox
            .readFile('refused/first.txt')
            .catch((caught: unknown) => caught)
          expect(SandboxFileNotFoundError.isInstance(first)).toBe(true)
        } finally {
          rmSync(hostDir, { recursive: true, force: true })
        }
      },
      timeout,
    )

    it(
      'refuses a whole batch with one invalid entry, anywhere in it, before writing any file',
      async () => {
        const sandbox = sandboxes.sandbox
        if (!sandbox.writeFiles) return
        const invalid = [
          { path: 'refused-batch/bad.txt', content: 42 },
          { path: 'refused-batch/bad.txt', content: 'x', mode: 0o4755 },
        ]
        for (const entry of invalid) {
          for (const at of [0, 1, 2]) {
            const files: unknown[] = [
              { path: 'refused-batch/first.txt', content: 'first' },
              { path: 'refused-batch/last.txt', content: 'last' },
            ]
            files.splice(at, 0, entry)
            const refused = await sandbox
              .writeFiles(files as never)
              .catch((caught: unknown) => caught)
            expect(SandboxConfigValidationError.isInstance(refused), String(refused)).toBe(true)
            expect(
              (refused as SandboxConfigValidationError).issues.map((issue) => issue.path),
            ).toEqual([`files.${at}.${'mode' in entry ? 'mode' : 'content'}`])
          }
        }
        // Seen from inside: not one file of any of the batches, nor their directory.
        const inside = await sandbox.exec('sh', ['-c', 'ls -A refused-batch; echo "exit $?"'], {
          cwd: sandbox.rootDir,
        })
        expect(inside.stdout).not.toContain('.txt')
        expect(inside.stdout).toMatch(/exit [1-9]/)
      },
      timeout,
    )

    it(
      'fails a streamed write whose source is shorter than the declared size',
      async () => {
        const error = await sandboxes.sandbox
          .writeFileStream('big/short.bin', chunked(1000, 100, 1), { size: 2000 })
          .catch((caught: unknown) => caught)
        expect(error).toBeInstanceOf(Error)
      },
      timeout,
    )
  })
}
