import { mkdirSync, mkdtempSync, renameSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { afterEach, describe, expect, it } from 'vitest'
import { DirectoryWatch } from '../src/directory-watch.js'
import { PathJail } from '../src/path-jail.js'
import type { FileChangeMessage } from '../src/protocol/messages.js'

/**
 * The watch's reconciling of inotify's names, on a real directory with the
 * kernel's inotify, in this process: the moves whose arriving half the
 * kernel never reports (the directory they land in is not watched yet).
 */

const cleanups: Array<() => void> = []
afterEach(() => {
  for (const cleanup of cleanups.splice(0)) cleanup()
})

/** A recursive watch on a fresh directory holding `files`, and the changes it reported, as `kind path [<- from]`. */
function watched(files: readonly string[]) {
  const root = mkdtempSync(join(tmpdir(), 'cordon-directory-watch-'))
  for (const file of files) {
    mkdirSync(join(root, file, '..'), { recursive: true })
    writeFileSync(join(root, file), file)
  }
  const reported: string[] = []
  let failure: unknown
  const watch = new DirectoryWatch(
    new PathJail([root], [root]),
    root,
    '/w',
    true,
    (events: FileChangeMessage[]) => {
      for (const event of events)
        reported.push(
          `${event.kind} ${event.path}${event.from ? ` <- ${event.from}` : ''}${event.directory ? ' (dir)' : ''}`,
        )
    },
    (error) => {
      failure = error
    },
  )
  watch.start()
  cleanups.push(() => {
    watch.stop()
    rmSync(root, { recursive: true, force: true })
  })
  return {
    root,
    /** What was reported once changes have settled (well past the watch's 25 ms batches). */
    settled: async (): Promise<string[]> => {
      await new Promise((resolve) => setTimeout(resolve, 300))
      if (failure) throw failure
      return reported
    },
  }
}

/** Blocks this process (and the watch's reading of inotify) for `ms`. */
function blockFor(ms: number): void {
  const until = Date.now() + ms
  while (Date.now() < until) {}
}

describe('DirectoryWatch: moves into a directory made just before', () => {
  it('a file moved into a directory made in the same moment is one renamed', async () => {
    const { root, settled } = watched(['old/a.txt'])
    mkdirSync(join(root, 'fresh'))
    renameSync(join(root, 'old/a.txt'), join(root, 'fresh/a.txt'))
    expect(await settled()).toEqual([
      'created /w/fresh (dir)',
      'renamed /w/fresh/a.txt <- /w/old/a.txt',
    ])
  })

  it('a directory moved into nested new directories is one renamed, its contents unreported', async () => {
    const { root, settled } = watched(['tree/one.txt', 'tree/deeper/two.txt'])
    mkdirSync(join(root, 'fresh/sub'), { recursive: true })
    renameSync(join(root, 'tree'), join(root, 'fresh/sub/tree'))
    expect(await settled()).toEqual([
      'created /w/fresh (dir)',
      'created /w/fresh/sub (dir)',
      'renamed /w/fresh/sub/tree <- /w/tree (dir)',
    ])
    // The moved tree is followed under its new name.
    writeFileSync(join(root, 'fresh/sub/tree/deeper/three.txt'), 'x')
    expect((await settled()).slice(3)).toEqual(['created /w/fresh/sub/tree/deeper/three.txt'])
  })

  it('a move whose leaving half comes in the batch after the new directory was read is one renamed', async () => {
    const { root, settled } = watched(['old/a.txt'])
    mkdirSync(join(root, 'fresh'))
    // The watch has read the directory's creation and its batch is due in 25 ms.
    await new Promise((resolve) => setTimeout(resolve, 5))
    setImmediate(() => {
      // Held here (after this turn's read of inotify) past the batch's time,
      // the next turn runs the batch's timer before it reads inotify again:
      // the batch is reconciled after the move but before its leaving half
      // is read, and reading fresh finds a.txt already there.
      blockFor(60)
      renameSync(join(root, 'old/a.txt'), join(root, 'fresh/a.txt'))
    })
    expect(await settled()).toEqual([
      'created /w/fresh (dir)',
      'renamed /w/fresh/a.txt <- /w/old/a.txt',
    ])
  })

  it('a new hard link to a file that stays is created, not a move', async () => {
    const { root, settled } = watched(['old/a.txt'])
    const { linkSync } = await import('node:fs')
    mkdirSync(join(root, 'fresh'))
    linkSync(join(root, 'old/a.txt'), join(root, 'fresh/a.txt'))
    expect(await settled()).toEqual(['created /w/fresh (dir)', 'created /w/fresh/a.txt'])
  })

  it('a file removed and another made in a new directory stay a removal and a creation', async () => {
    const { root, settled } = watched(['old/a.txt'])
    rmSync(join(root, 'old/a.txt'))
    mkdirSync(join(root, 'fresh'))
    writeFileSync(join(root, 'fresh/b.txt'), 'b')
    expect(await settled()).toEqual([
      'created /w/fresh (dir)',
      'created /w/fresh/b.txt',
      'removed /w/old/a.txt',
    ])
  })
})
