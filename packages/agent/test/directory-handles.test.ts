import {
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  rmSync,
  symlinkSync,
  writeFileSync,
} from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { afterAll, describe, expect, it } from 'vitest'
import { DirectoryHandles } from '../src/directory-handles.js'
import { PathJail, PathRefusedError } from '../src/path-jail.js'

const made: string[] = []
afterAll(() => {
  for (const base of made) rmSync(base, { recursive: true, force: true })
})

function tree(directories: number) {
  const base = mkdtempSync(join(tmpdir(), 'cordon-dir-handles-'))
  made.push(base)
  const root = join(base, 'root')
  const outside = join(base, 'outside')
  mkdirSync(outside)
  writeFileSync(join(outside, 'secret'), 'host')
  for (let index = 0; index < directories; index++) {
    mkdirSync(join(root, `d${index}`), { recursive: true })
    writeFileSync(join(root, `d${index}`, 'file'), `in d${index}`)
  }
  return { root, outside, jail: new PathJail([root], [root]) }
}

const openDescriptors = () => readdirSync('/proc/self/fd').length

describe('the directories a batch opens its files in', () => {
  it('names a file inside a directory opened and checked once', () => {
    const { root, jail } = tree(1)
    const handles = new DirectoryHandles(jail, 'read')
    const before = openDescriptors()
    const first = handles.childPath(join(root, 'd0'), 'file', '/d0/file')
    expect(first).toMatch(/^\/proc\/self\/fd\/\d+\/file$/)
    expect(readFileSync(first!, 'utf8')).toBe('in d0')
    // The same directory again: the same descriptor, nothing opened.
    expect(handles.childPath(join(root, 'd0'), 'other', '/d0/other')).toBe(
      first!.replace(/file$/, 'other'),
    )
    expect(openDescriptors() - before).toBe(1)
    handles.close()
    expect(openDescriptors()).toBe(before)
  })

  it('refuses a directory outside the roots, and leaves a link or a bad name to the per-file way', () => {
    const { root, outside, jail } = tree(1)
    const handles = new DirectoryHandles(jail, 'read')
    expect(() => handles.childPath(outside, 'secret', '/outside/secret')).toThrow(PathRefusedError)
    symlinkSync(outside, join(root, 'link'))
    expect(handles.childPath(join(root, 'link'), 'secret', '/link/secret')).toBeUndefined()
    for (const name of ['..', '.', 'a/b'])
      expect(handles.childPath(join(root, 'd0'), name, `/d0/${name}`)).toBeUndefined()
    handles.close()
  })

  it('keeps 64 directories open at most', () => {
    const { root, jail } = tree(100)
    const handles = new DirectoryHandles(jail, 'write')
    const before = openDescriptors()
    // A walk's order: each directory's files together.
    for (let index = 0; index < 100; index++)
      for (let file = 0; file < 10; file++)
        expect(
          handles.childPath(join(root, `d${index}`), `f${file}`, `/d${index}/f${file}`),
        ).toBeDefined()
    expect(openDescriptors() - before).toBe(64)
    handles.close()
    expect(openDescriptors()).toBe(before)
  })

  it('gives up for the batch when its files come from more directories in turn than it keeps open', () => {
    const { root, jail } = tree(70)
    const handles = new DirectoryHandles(jail, 'write')
    const before = openDescriptors()
    const answers: Array<string | undefined> = []
    for (let round = 0; round < 3; round++)
      for (let index = 0; index < 70; index++)
        answers.push(
          handles.childPath(join(root, `d${index}`), `f${round}`, `/d${index}/f${round}`),
        )
    // The first 70 names, then a few reopens, then the per-file way for the rest.
    expect(answers.slice(0, 70).every((answer) => answer !== undefined)).toBe(true)
    expect(answers.at(-1)).toBeUndefined()
    expect(answers.filter((answer) => answer !== undefined).length).toBeLessThan(90)
    expect(openDescriptors()).toBe(before)
  })
})
