import {
  mkdir,
  mkdtemp,
  readdir,
  readFile,
  rename,
  rm,
  stat,
  symlink,
  writeFile,
} from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { fileURLToPath } from 'node:url'
import {
  type SandboxFileChange,
  SandboxFileNotFoundError,
  SandboxOperationError,
  SandboxPathError,
} from '@cordon/core'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import type { AgentSandbox } from '../src/sandbox/index.js'
import { type AgentUnderTest, startAgentProcess, tcpPortOf } from './agent-harness.js'
import { tcpAgentSandbox } from './tcp-agent-sandbox.js'

/** The file API (stat, remove, rename, makeDirectory, watchDirectory) through the real bundled agent. */

function sandboxOn(agent: AgentUnderTest): AgentSandbox {
  return tcpAgentSandbox({
    port: tcpPortOf(agent),
    secret: agent.secret,
    init: { rootDir: agent.outputs },
  })
}

async function refusal(promise: Promise<unknown>): Promise<unknown> {
  return promise.then(
    () => {
      throw new Error('expected a refusal')
    },
    (error: unknown) => error,
  )
}

describe('file API through the agent', () => {
  let agent: AgentUnderTest
  let sandbox: AgentSandbox
  let outside: string
  /** The agent's renames and fstats, one a line (fixtures/fs-call-log.cjs). */
  let fsLog: string
  /** The swap the preloaded module makes on a directory's read (fixtures/fs-call-log.cjs). */
  let swapOnRead: string
  const loggedCalls = async (name: string): Promise<string[]> =>
    (await readFile(fsLog, 'utf8')).split('\n').filter((line) => line.startsWith(name))
  beforeAll(async () => {
    fsLog = join(await mkdtemp(join(tmpdir(), 'cordon-fs-calls-')), 'calls.log')
    await writeFile(fsLog, '')
    swapOnRead = join(fsLog, '..', 'swap-on-read')
    await writeFile(swapOnRead, '')
    agent = await startAgentProcess({
      listen: 'tcp:127.0.0.1:0',
      secretVia: 'env',
      env: {
        NODE_OPTIONS: `--require ${fileURLToPath(new URL('./fixtures/fs-call-log.cjs', import.meta.url))}`,
        CORDON_TEST_FS_LOG: fsLog,
        CORDON_TEST_SWAP_ON_READ: swapOnRead,
      },
    })
    sandbox = sandboxOn(agent)
    // A directory beside the roots: the host's, as far as the sandbox's files go.
    outside = join(agent.dir, 'host-private')
    await mkdir(outside)
    await writeFile(join(outside, 'secret.txt'), 'host data, 24 bytes long')
  })
  afterAll(async () => {
    await sandbox?.destroy()
    await agent?.stop()
    await rm(join(fsLog, '..'), { recursive: true, force: true })
  })

  describe('statFile', () => {
    it('reports a file a command made: type, size, mode and mtime', async () => {
      const before = Date.now()
      const made = await sandbox.exec('sh', ['-c', 'printf 12345 > made.txt; chmod 640 made.txt'])
      expect(made.exitCode).toBe(0)
      const info = await sandbox.statFile('made.txt')
      expect(info).toMatchObject({
        path: join(agent.outputs, 'made.txt'),
        type: 'file',
        size: 5,
        mode: 0o640,
        isSymlink: false,
      })
      expect(info.modifiedMs).toBeGreaterThanOrEqual(before - 1_000)
      expect(info.modifiedMs).toBeLessThanOrEqual(Date.now() + 1_000)
      expect((await sandbox.statFile(agent.outputs)).type).toBe('directory')
    })

    it('reports a link as a link unless asked to follow it', async () => {
      await writeFile(join(agent.outputs, 'target.txt'), 'abc')
      await symlink('target.txt', join(agent.outputs, 'link.txt'))
      const link = await sandbox.statFile('link.txt')
      expect(link).toMatchObject({ type: 'symlink', isSymlink: true, symlinkTarget: 'target.txt' })
      const followed = await sandbox.statFile('link.txt', { followSymlinks: true })
      expect(followed).toMatchObject({ type: 'file', size: 3, isSymlink: false })
      expect(followed.symlinkTarget).toBeUndefined()
    })

    it('never reveals what a link to the outside leads to', async () => {
      const secret = join(outside, 'secret.txt')
      await symlink(secret, join(agent.outputs, 'escape'))
      // Not followed: only the link itself (its own text, which the sandbox wrote).
      const link = await sandbox.statFile('escape')
      expect(link.type).toBe('symlink')
      expect(link.size).toBe(secret.length)
      // Followed: refused, as a read of it would be.
      const error = await refusal(sandbox.statFile('escape', { followSymlinks: true }))
      expect(SandboxPathError.isInstance(error)).toBe(true)
      expect((error as Error).message).not.toContain('24')
      // Through a linked directory, the parent is resolved and refused.
      await symlink(outside, join(agent.outputs, 'escape-dir'))
      const through = await refusal(sandbox.statFile('escape-dir/secret.txt'))
      expect(SandboxPathError.isInstance(through)).toBe(true)
    })

    it('refuses a path outside the roots, and reports a missing one as not found', async () => {
      expect(SandboxPathError.isInstance(await refusal(sandbox.statFile('/etc/passwd')))).toBe(true)
      expect(
        SandboxPathError.isInstance(await refusal(sandbox.statFile(join(outside, 'secret.txt')))),
      ).toBe(true)
      expect(SandboxFileNotFoundError.isInstance(await refusal(sandbox.statFile('nope')))).toBe(
        true,
      )
      await symlink('nowhere', join(agent.outputs, 'dangling'))
      expect((await sandbox.statFile('dangling')).type).toBe('symlink')
      expect(
        SandboxFileNotFoundError.isInstance(
          await refusal(sandbox.statFile('dangling', { followSymlinks: true })),
        ),
      ).toBe(true)
    })
  })

  describe('makeDirectory', () => {
    it('makes a directory with its parents, and says whether it made it', async () => {
      expect(await sandbox.makeDirectory('deep/er/est')).toBe(true)
      expect((await stat(join(agent.outputs, 'deep/er/est'))).isDirectory()).toBe(true)
      expect(await sandbox.makeDirectory('deep/er/est')).toBe(false)
      const seen = await sandbox.exec('ls', ['-d', join(agent.outputs, 'deep/er/est')])
      expect(seen.exitCode).toBe(0)
    })

    it('refuses outside the write roots, existing or not, and through a link', async () => {
      for (const path of [
        '/etc',
        '/tmp/cordon-mkdir-refused',
        join(outside, 'x'),
        'escape-dir/x',
      ]) {
        const error = await refusal(sandbox.makeDirectory(path))
        expect(SandboxPathError.isInstance(error), path).toBe(true)
      }
      await expect(stat(join(outside, 'x'))).rejects.toThrow()
    })

    it('refuses a path where a file is in the way', async () => {
      await writeFile(join(agent.outputs, 'plain'), 'x')
      const error = await refusal(sandbox.makeDirectory('plain/sub'))
      expect(SandboxOperationError.isInstance(error)).toBe(true)
    })
  })

  describe('removeFile', () => {
    it('removes a file, an empty directory, and with recursive a tree', async () => {
      await sandbox.exec('sh', ['-c', 'mkdir -p rm/empty rm/full/sub && touch rm/f rm/full/sub/g'])
      await sandbox.removeFile('rm/f')
      await sandbox.removeFile('rm/empty')
      const notEmpty = await refusal(sandbox.removeFile('rm/full'))
      expect(SandboxOperationError.isInstance(notEmpty)).toBe(true)
      expect((notEmpty as Error).message).toContain('not empty')
      expect((await stat(join(agent.outputs, 'rm/full/sub/g'))).isFile()).toBe(true)
      await sandbox.removeFile('rm/full', { recursive: true })
      const left = await sandbox.exec('ls', ['-A', join(agent.outputs, 'rm')])
      expect(left.stdout).toBe('')
      expect(SandboxFileNotFoundError.isInstance(await refusal(sandbox.removeFile('rm/f')))).toBe(
        true,
      )
    })

    it('removes a link, never what it leads to, even recursively', async () => {
      await mkdir(join(agent.outputs, 'tree'))
      await symlink(outside, join(agent.outputs, 'tree/out-link'))
      await symlink(join(outside, 'secret.txt'), join(agent.outputs, 'file-link'))
      await sandbox.removeFile('file-link')
      await sandbox.removeFile('tree', { recursive: true })
      expect(await readFile(join(outside, 'secret.txt'), 'utf8')).toBe('host data, 24 bytes long')
    })

    it('refuses the root itself and anything outside the write roots, as writeFile does', async () => {
      const root = await refusal(sandbox.removeFile(agent.outputs, { recursive: true }))
      expect(SandboxPathError.isInstance(root)).toBe(true)
      expect((root as Error).message).toContain('root')
      for (const path of [
        '/etc/passwd',
        join(outside, 'secret.txt'),
        'escape-dir/secret.txt',
        '..',
      ]) {
        const error = await refusal(sandbox.removeFile(path, { recursive: true }))
        expect(SandboxPathError.isInstance(error), path).toBe(true)
        const written = await refusal(sandbox.writeFile(path, 'x'))
        expect(SandboxPathError.isInstance(written), path).toBe(true)
      }
      expect(await readFile(join(outside, 'secret.txt'), 'utf8')).toBe('host data, 24 bytes long')
    })
  })

  describe('renameFile', () => {
    it('moves a file and a directory inside the roots, making the new parents', async () => {
      await sandbox.writeFile('mv/a.txt', 'moved')
      await sandbox.renameFile('mv/a.txt', 'mv/new/place/b.txt')
      expect(await readFile(join(agent.outputs, 'mv/new/place/b.txt'), 'utf8')).toBe('moved')
      await sandbox.renameFile('mv/new', 'mv2')
      const cat = await sandbox.exec('cat', [join(agent.outputs, 'mv2/place/b.txt')])
      expect(cat.stdout).toBe('moved')
    })

    it('refuses a move out of the write roots, into them from outside, and of the root', async () => {
      await sandbox.writeFile('stay.txt', 'here')
      for (const to of ['/tmp/cordon-escaped', join(outside, 'stolen'), 'escape-dir/stolen']) {
        const error = await refusal(sandbox.renameFile('stay.txt', to))
        expect(SandboxPathError.isInstance(error), to).toBe(true)
      }
      expect(await readFile(join(agent.outputs, 'stay.txt'), 'utf8')).toBe('here')
      const inward = await refusal(sandbox.renameFile(join(outside, 'secret.txt'), 'got.txt'))
      expect(SandboxPathError.isInstance(inward)).toBe(true)
      const root = await refusal(sandbox.renameFile(agent.outputs, 'inner'))
      expect(SandboxPathError.isInstance(root)).toBe(true)
      expect(
        SandboxFileNotFoundError.isInstance(await refusal(sandbox.renameFile('gone', 'x'))),
      ).toBe(true)
    })
  })

  describe('watchDirectory', () => {
    async function collectUntil(
      watch: AsyncIterable<SandboxFileChange>,
      done: (changes: SandboxFileChange[]) => boolean,
    ): Promise<SandboxFileChange[]> {
      const changes: SandboxFileChange[] = []
      for await (const change of watch) {
        changes.push(change)
        if (done(changes)) break
      }
      return changes
    }

    it("sees a command's touch, write, move and removal", async () => {
      await sandbox.makeDirectory('watched')
      const dir = join(agent.outputs, 'watched')
      const watch = await sandbox.watchDirectory('watched')
      const seen = collectUntil(watch, (changes) => changes.some((c) => c.type === 'removed'))
      await sandbox.exec('touch', [join(dir, 'a')])
      await new Promise((resolve) => setTimeout(resolve, 100))
      await sandbox.exec('sh', ['-c', `echo more >> ${dir}/a`])
      await new Promise((resolve) => setTimeout(resolve, 100))
      await sandbox.exec('mv', [join(dir, 'a'), join(dir, 'b')])
      await new Promise((resolve) => setTimeout(resolve, 100))
      await sandbox.exec('rm', [join(dir, 'b')])
      const changes = await seen
      expect(changes).toEqual([
        { type: 'created', path: join(dir, 'a'), isDirectory: false },
        { type: 'modified', path: join(dir, 'a'), isDirectory: false },
        { type: 'renamed', path: join(dir, 'b'), oldPath: join(dir, 'a'), isDirectory: false },
        { type: 'removed', path: join(dir, 'b'), isDirectory: false },
      ])
    })

    it('reports a writeFile as its target, and recursive watches follow new directories', async () => {
      await sandbox.makeDirectory('watched-deep')
      const dir = join(agent.outputs, 'watched-deep')
      const watch = await sandbox.watchDirectory(dir, { recursive: true })
      const seen = collectUntil(watch, (changes) =>
        changes.some((c) => c.path.endsWith('/late.txt')),
      )
      await sandbox.writeFile(join(dir, 'via-api.txt'), 'x')
      await sandbox.exec('mkdir', ['-p', join(dir, 'sub/inner')])
      await new Promise((resolve) => setTimeout(resolve, 100))
      await sandbox.exec('touch', [join(dir, 'sub/inner/late.txt')])
      const changes = await seen
      expect(changes.map((c) => [c.type, c.path.slice(dir.length)])).toEqual([
        ['created', '/via-api.txt'],
        ['created', '/sub'],
        ['created', '/sub/inner'],
        ['created', '/sub/inner/late.txt'],
      ])
    })

    it('ends when its signal aborts or it is closed', async () => {
      const controller = new AbortController()
      const watch = await sandbox.watchDirectory('.', { signal: controller.signal })
      const ended = collectUntil(watch, () => false)
      controller.abort()
      expect(await ended).toEqual([])
      const closing = await sandbox.watchDirectory('.')
      const closed = collectUntil(closing, () => false)
      await closing.close()
      expect(await closed).toEqual([])
    })

    it('refuses a directory outside the read roots, and a file', async () => {
      expect(SandboxPathError.isInstance(await refusal(sandbox.watchDirectory(outside)))).toBe(true)
      expect(SandboxPathError.isInstance(await refusal(sandbox.watchDirectory('escape-dir')))).toBe(
        true,
      )
      await sandbox.writeFile('not-a-dir', 'x')
      expect(
        SandboxOperationError.isInstance(await refusal(sandbox.watchDirectory('not-a-dir'))),
      ).toBe(true)
    })
  })

  describe('batch writes and reads (one resolution per directory)', () => {
    /** A file name, the mode asked for (none: the default), and the mode it must get. */
    const BATCH_MODES: ReadonlyArray<[string, number | undefined, number]> = [
      ['plain', undefined, 0o644],
      ['exec', 0o755, 0o755],
      ['private', 0o600, 0o600],
      // Bits a typical umask (022) strips, and a set-id bit the write would clear.
      ['shared', 0o666, 0o666],
      ['setuid', 0o4755, 0o4755],
    ]

    it('judges each file of a batch by its own name: a link leading out is refused, one inside is written through', async () => {
      await mkdir(join(agent.outputs, 'batch'))
      await writeFile(join(agent.outputs, 'batch/inside-target.txt'), 'old')
      await symlink(join(outside, 'secret.txt'), join(agent.outputs, 'batch/out-link'))
      await symlink('inside-target.txt', join(agent.outputs, 'batch/in-link'))
      // The first file makes and resolves the directory; the links come after it.
      await sandbox.writeFiles([
        { path: 'batch/first.txt', content: 'first' },
        { path: 'batch/in-link', content: 'through the link' },
      ])
      expect(await readFile(join(agent.outputs, 'batch/first.txt'), 'utf8')).toBe('first')
      expect(await readFile(join(agent.outputs, 'batch/inside-target.txt'), 'utf8')).toBe(
        'through the link',
      )
      const error = await refusal(
        sandbox.writeFiles([
          { path: 'batch/second.txt', content: 'second' },
          { path: 'batch/out-link', content: 'escaped' },
        ]),
      )
      expect(SandboxPathError.isInstance(error)).toBe(true)
      expect(await readFile(join(outside, 'secret.txt'), 'utf8')).toBe('host data, 24 bytes long')
    })

    it('gives every file of a batch its mode, whether it is created with it or set after the write', async () => {
      await mkdir(join(agent.outputs, 'modes'))
      await writeFile(join(agent.outputs, 'modes/kept.txt'), 'old', { mode: 0o640 })
      const wanted: Array<[string, number | undefined, number]> = [
        ...BATCH_MODES,
        ['kept.txt', undefined, 0o640],
      ]
      await sandbox.writeFiles(
        wanted.map(([name, mode]) => ({
          path: `modes/${name}`,
          content: `content of ${name}`,
          ...(mode === undefined ? {} : { mode }),
        })),
      )
      for (const [name, , mode] of wanted) {
        const info = await stat(join(agent.outputs, 'modes', name))
        expect(info.mode & 0o7777, name).toBe(mode)
        expect(await readFile(join(agent.outputs, 'modes', name), 'utf8')).toBe(
          `content of ${name}`,
        )
      }
    })

    it('creates the files of a directory the batch makes where they stay, not through a temporary name, with their modes', async () => {
      const wanted = BATCH_MODES
      await sandbox.writeFiles(
        wanted.flatMap(([name, mode]) =>
          ['fresh/a', 'fresh/a/b'].map((directory) => ({
            path: `${directory}/${name}`,
            content: `content of ${name}`,
            ...(mode === undefined ? {} : { mode }),
          })),
        ),
      )
      for (const directory of ['fresh/a', 'fresh/a/b']) {
        for (const [name, , mode] of wanted) {
          const path = join(agent.outputs, directory, name)
          expect((await stat(path)).mode & 0o7777, name).toBe(mode)
          expect(await readFile(path, 'utf8')).toBe(`content of ${name}`)
        }
        const names = (await readdir(join(agent.outputs, directory))).filter((n) => n !== 'b')
        expect(names.sort()).toEqual(wanted.map(([name]) => name).sort())
      }
      // Made where they stay: no file under fresh/ was placed by a rename.
      const placedByRename = async () =>
        (await loggedCalls('renameSync ')).filter((line) => line.includes('/fresh/'))
      expect(await placedByRename()).toEqual([])
      // A second batch over the same files replaces them, through a temporary
      // name: the directory is no longer one the batch made.
      await sandbox.writeFiles([{ path: 'fresh/a/plain', content: 'replaced' }])
      expect(await readFile(join(agent.outputs, 'fresh/a/plain'), 'utf8')).toBe('replaced')
      expect(await placedByRename()).toEqual([`renameSync ${join(agent.outputs, 'fresh/a/plain')}`])
    })

    it('a batch read leaves out a link that leads out of the roots, reading each file where the walk found it', async () => {
      await mkdir(join(agent.outputs, 'rbatch/sub'), { recursive: true })
      await writeFile(join(agent.outputs, 'rbatch/a.txt'), 'a')
      await writeFile(join(agent.outputs, 'rbatch/sub/b.txt'), 'b')
      await symlink(join(outside, 'secret.txt'), join(agent.outputs, 'rbatch/leak'))
      const seen = new Map<string, string>()
      for await (const file of await sandbox.readFiles('rbatch'))
        seen.set(file.path, Buffer.from(file.content).toString())
      expect([...seen.values()].sort()).toEqual(['a', 'b'])
    })

    it('a batch checks each directory once, not each file, and reads in the directories it listed even when one is swapped for a link since', async () => {
      // (The walk of a listing is checked the same way: see the test after this one.)
      const names = Array.from({ length: 30 }, (_, index) => `f${index}.txt`)
      const checks = async () => (await loggedCalls('descriptorCheck')).length
      let before = await checks()
      await sandbox.writeFiles(
        ['once/a', 'once/b'].flatMap((directory) =>
          names.map((name) => ({ path: `${directory}/${name}`, content: `${directory}/${name}` })),
        ),
      )
      // The two directories the batch made: one check each, none for the 60 files.
      expect((await checks()) - before).toBe(2)
      before = await checks()
      const seen = new Map<string, string>()
      for await (const file of await sandbox.readFiles('once'))
        seen.set(file.path, Buffer.from(file.content).toString())
      expect(seen.size).toBe(60)
      for (const [path, content] of seen) expect(path.endsWith(content)).toBe(true)
      // The walk's: the directory named and its two; the reads need none more.
      expect((await checks()) - before).toBe(3)
      // Over the same files: each replaced through a temporary name, still one check a directory.
      before = await checks()
      await sandbox.writeFiles(
        ['once/a', 'once/b'].flatMap((directory) =>
          names.map((name) => ({ path: `${directory}/${name}`, content: `${directory}/${name}` })),
        ),
      )
      expect((await checks()) - before).toBe(2)

      // Listed, then the directory moved away and a link to the host's files put in its place.
      await writeFile(join(outside, 'f0.txt'), 'host data')
      const listed = await sandbox.readFiles('once')
      await rename(join(agent.outputs, 'once/a'), join(agent.outputs, 'moved-away'))
      await symlink(outside, join(agent.outputs, 'once/a'))
      const after = new Map<string, string>()
      for await (const file of listed) after.set(file.path, Buffer.from(file.content).toString())
      // Read in the directories the walk opened: the files it listed, as they are, none of the host's.
      expect(after).toEqual(seen)
      expect([...after.values()]).not.toContain('host data')
    })

    /**
     * Makes `<name>/kept.txt` and `<name>/inner/<innerFile>`, and has `inner`
     * swapped for a link to `/etc` in the moment between the walk's read of
     * `<name>` and its read of `inner`: made deterministic by a preloaded hook
     * that does the swap on the parent's readdir (fixtures/fs-call-log.cjs).
     * (/etc: readable by the sandbox user, as the host's private directory is not.)
     */
    async function swappedWhileWalking<T>(
      name: string,
      innerFile: string,
      walk: () => Promise<T>,
    ): Promise<T> {
      await mkdir(join(agent.outputs, name, 'inner'), { recursive: true })
      await writeFile(join(agent.outputs, name, 'inner', innerFile), 'mine')
      await writeFile(join(agent.outputs, name, 'kept.txt'), 'kept')
      await writeFile(
        swapOnRead,
        `${join(agent.outputs, name)}\n${join(agent.outputs, name, 'inner')}\n/etc\n`,
      )
      try {
        return await walk()
      } finally {
        await writeFile(swapOnRead, '')
      }
    }

    it('a walk does not follow a directory swapped for a link to the outside after its parent was read', async () => {
      const listed = await swappedWhileWalking('walked', 'mine.txt', () =>
        sandbox.listFiles('walked'),
      )
      expect(listed.map((entry) => entry.path.split('/').pop())).toEqual(['kept.txt'])
    })

    it('a batch read gives each file whole up to its listed size without asking its size again, an empty one included', async () => {
      await mkdir(join(agent.outputs, 'whole'))
      const large = Buffer.alloc(300 * 1024).map((_, i) => i % 251)
      await writeFile(join(agent.outputs, 'whole/empty.txt'), '')
      await writeFile(join(agent.outputs, 'whole/large.bin'), large)
      const seen = new Map<string, Buffer>()
      const fstatsBefore = (await loggedCalls('fstatSync')).length
      const listed = await sandbox.readFiles('whole')
      // The listing reads small files and asks the size of one too large to
      // hold from its descriptor (file-prefetch.ts): the empty file is asked
      // what it is, having given no byte, and the large one its size.
      expect((await loggedCalls('fstatSync')).length - fstatsBefore).toBe(2)
      for await (const file of listed)
        seen.set(file.path.split('/').pop()!, Buffer.from(file.content))
      // Read up to its listed size, without asking its size again.
      expect((await loggedCalls('fstatSync')).length - fstatsBefore).toBe(2)
      expect([...seen.keys()].sort()).toEqual(['empty.txt', 'large.bin'])
      expect(seen.get('empty.txt')!.byteLength).toBe(0)
      expect(seen.get('large.bin')!.equals(large)).toBe(true)
    })

    it('a batch read lists a small file by reading it (no lstat, one open), and sends it as it was when listed', async () => {
      await mkdir(join(agent.outputs, 'early/sub'), { recursive: true })
      const names = Array.from({ length: 20 }, (_, index) => `sub/f${index}.txt`)
      for (const name of names) await writeFile(join(agent.outputs, 'early', name), `old ${name}`)
      const large = Buffer.alloc(100 * 1024, 'o')
      await writeFile(join(agent.outputs, 'early/large.bin'), large)
      const callsUnder = async (call: string) =>
        (await loggedCalls(`${call} `)).filter((line) => line.includes('/early/'))
      const lstatsBefore = (await callsUnder('lstatSync')).length
      const opensBefore = (await callsUnder('openSync')).length
      const listed = await sandbox.readFiles('early')
      // Changed after the listing, each to as many bytes as it had.
      for (const name of names) await writeFile(join(agent.outputs, 'early', name), `new ${name}`)
      await writeFile(join(agent.outputs, 'early/large.bin'), Buffer.alloc(100 * 1024, 'n'))
      const seen = new Map<string, string>()
      for await (const file of listed)
        seen.set(
          file.path.slice(file.path.indexOf('/early/') + 7),
          Buffer.from(file.content).toString(),
        )
      // The small files as listed; the large one, too large to hold, read after the listing.
      for (const name of names) expect(seen.get(name)).toBe(`old ${name}`)
      expect(seen.get('large.bin')).toBe(Buffer.alloc(100 * 1024, 'n').toString())
      // No file's size asked by path; a small file opened once, the large one twice.
      expect((await callsUnder('lstatSync')).length - lstatsBefore).toBe(0)
      const opens = (await callsUnder('openSync')).slice(opensBefore)
      for (const name of names)
        expect(opens.filter((line) => line.endsWith(`/early/${name}`))).toHaveLength(1)
      expect(opens.filter((line) => line.endsWith('/early/large.bin'))).toHaveLength(2)
    })

    it('a batch read does not read a directory swapped for a link to the outside while it lists', async () => {
      // The files are small, so the walk itself reads them (file-prefetch.ts).
      const seen = await swappedWhileWalking('walkread', 'passwd', async () => {
        const contents = new Map<string, string>()
        for await (const file of await sandbox.readFiles('walkread'))
          contents.set(file.path.split('/').pop()!, Buffer.from(file.content).toString())
        return contents
      })
      expect(Object.fromEntries(seen)).toEqual({ 'kept.txt': 'kept' })
    })

    it('a batch read holds at most 4 MiB read while listing: past it, files are listed by their size and read after', async () => {
      await mkdir(join(agent.outputs, 'bounded'))
      // 80 files of 60 KiB: 4.7 MiB, more than the listing reads.
      const contents = Array.from({ length: 80 }, (_, index) => Buffer.alloc(60 * 1024, index))
      for (const [index, content] of contents.entries())
        await writeFile(join(agent.outputs, `bounded/f${index}.bin`), content)
      const lstatsBefore = (await loggedCalls('lstatSync ')).length
      const seen = new Map<string, Buffer>()
      for await (const file of await sandbox.readFiles('bounded'))
        seen.set(file.path.split('/').pop()!, Buffer.from(file.content))
      const lstats = (await loggedCalls('lstatSync ')).length - lstatsBefore
      // 4 MiB hold 68 of them; the 69th, larger than what was left, is listed
      // from its descriptor; the other 11 (and the directory itself) by path.
      expect(Math.floor((4 * 1024 * 1024) / (60 * 1024))).toBe(68)
      expect(lstats).toBe(1 + 11)
      expect(seen.size).toBe(80)
      for (const [index, content] of contents.entries())
        expect(seen.get(`f${index}.bin`)!.equals(content)).toBe(true)
    })
  })
})
