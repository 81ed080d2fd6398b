import { chmod, chown, mkdir, mkdtemp, readFile, rm, stat } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import type { CordonSandbox, CordonSandboxProvider } from '@cordon/core'
import { afterEach, beforeEach, describe, expect, it } from 'vitest'
import { describeAlongside } from './run-alongside.js'
import { testProvider } from './test-run.js'

/**
 * MIGRATING.md's recipe for one host directory that several sandboxes reuse
 * ("Docker commands run as a uid of the sandbox's own"), followed as
 * written: the directory owned by a non-root host user, `backend.user` set
 * to that `uid:gid`. And its warning: a root-owned 1777 directory with the
 * default user is not enough.
 */
const OWNER = { uid: 1000, gid: 1000 }

/** Runs a shell script in the sandbox's root directory; its output as seen from inside. */
async function inside(sandbox: CordonSandbox, script: string) {
  return sandbox.exec('sh', ['-c', script], { cwd: sandbox.rootDir })
}

for (const runtime of ['docker', 'runsc'] as const) {
  describeAlongside(`one host directory reused by several sandboxes (${runtime})`, () => {
    let root: string
    let shared: string
    beforeEach(async () => {
      root = await mkdtemp(join(tmpdir(), 'cordon-shared-dir-'))
      shared = join(root, 'work')
      await mkdir(shared)
    })
    afterEach(async () => {
      await rm(root, { recursive: true, force: true })
    })

    /** The recipe: the directory's owner named as every sandbox's user. */
    async function recipeProvider(): Promise<CordonSandboxProvider> {
      await chown(shared, OWNER.uid, OWNER.gid)
      return testProvider(
        { runtime, user: `${OWNER.uid}:${OWNER.gid}` },
        { layout: { outputs: { source: { type: 'hostDir', hostPath: shared } } } },
      )
    }

    it('one after the other: the second sandbox writes, renames and removes what the first left', async () => {
      const provider = await recipeProvider()
      try {
        const first = await provider.create()
        const wrote = await inside(first, 'mkdir notes && echo first > notes/a.txt && id -u')
        expect(wrote.stderr).toBe('')
        expect(wrote.stdout).toBe(`${OWNER.uid}\n`)
        await first.destroy()

        const second = await provider.create()
        const reused = await inside(
          second,
          [
            'echo second >> notes/a.txt',
            'echo new > notes/b.txt',
            'mv notes/a.txt notes/moved.txt',
            'mkdir notes/sub && rmdir notes/sub',
            'cat notes/moved.txt notes/b.txt',
          ].join(' && '),
        )
        expect(reused.stderr).toBe('')
        expect(reused.exitCode).toBe(0)
        expect(reused.stdout).toBe('first\nsecond\nnew\n')
        await second.destroy()

        // And the owner keeps everything both left.
        for (const name of ['notes', 'notes/moved.txt', 'notes/b.txt']) {
          expect(await stat(join(shared, name))).toMatchObject(OWNER)
        }
        expect(await readFile(join(shared, 'notes/moved.txt'), 'utf8')).toBe('first\nsecond\n')
      } finally {
        await provider.close()
      }
    })

    it('at the same time: each writes into what the other made, also after the other ended', async () => {
      const provider = await recipeProvider()
      try {
        const [one, two] = await Promise.all([provider.create(), provider.create()])
        expect((await inside(one, 'mkdir notes && echo one > notes/log')).exitCode).toBe(0)
        const both = await inside(two, 'echo two >> notes/log && echo two > notes/two.txt')
        expect(both.stderr).toBe('')
        const seen = await inside(one, 'echo one-again >> notes/log && cat notes/log notes/two.txt')
        expect(seen.stderr).toBe('')
        expect(seen.stdout).toBe('one\ntwo\none-again\ntwo\n')
        // The first one's end (its seal walks the shared directory) leaves the second able to write.
        await one.destroy()
        const after = await inside(
          two,
          'echo after >> notes/log && rm notes/two.txt && cat notes/log',
        )
        expect(after.stderr).toBe('')
        expect(after.stdout).toBe('one\ntwo\none-again\nafter\n')
        await two.destroy()
        expect(await readFile(join(shared, 'notes/log'), 'utf8')).toBe(
          'one\ntwo\none-again\nafter\n',
        )
        expect(await stat(join(shared, 'notes/log'))).toMatchObject(OWNER)
      } finally {
        await provider.close()
      }
    })

    it("the warning: with a root-owned 1777 directory, the next sandbox cannot write in the first one's notes/", async () => {
      await chown(shared, 0, 0)
      await chmod(shared, 0o1777)
      const provider = testProvider(
        { runtime },
        { layout: { outputs: { source: { type: 'hostDir', hostPath: shared } } } },
      )
      try {
        const first = await provider.create()
        expect((await inside(first, 'mkdir notes && echo first > notes/a.txt')).exitCode).toBe(0)
        await first.destroy()
        const notes = await stat(join(shared, 'notes'))
        expect({ uid: notes.uid, gid: notes.gid, mode: notes.mode & 0o7777 }).toEqual({
          uid: 0,
          gid: 0,
          mode: 0o755,
        })
        const second = await provider.create()
        const refused = await inside(second, 'echo second > notes/b.txt')
        expect(refused.exitCode).not.toBe(0)
        expect(refused.stderr).toMatch(/permission denied/i)
        await second.destroy()
      } finally {
        await provider.close()
      }
    })
  })
}
