import { execFileSync } from 'node:child_process'
import {
  closeSync,
  constants,
  existsSync,
  mkdirSync,
  openSync,
  readdirSync,
  symlinkSync,
} from 'node:fs'
import {
  chmod,
  lchown,
  lstat,
  mkdir,
  mkdtemp,
  readdir,
  realpath,
  symlink,
  writeFile,
} from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { afterEach, describe, expect, it } from 'vitest'
import { AGENT_ENV, readAgentConfig } from '../src/agent-config.js'
import { resolvesInside, sealOutputs } from '../src/output-seal.js'

/** A uid no account on this machine has, standing for a sandbox's user. */
const SANDBOX_UID = 1_234_567
/** The owner of a directory these tests seal, standing for the host user. */
const HOST_USER = { uid: 4321, gid: 4322 }

/** Everything under `root`, as `path: kind uid:gid mode`, for comparing whole trees. */
async function describeTree(root: string): Promise<string[]> {
  const lines: string[] = []
  const walk = async (directory: string, prefix: string): Promise<void> => {
    for (const name of (await readdir(directory)).sort()) {
      const stats = await lstat(join(directory, name))
      const kind = stats.isDirectory() ? 'dir' : stats.isSymbolicLink() ? 'link' : 'file'
      lines.push(
        `${prefix}${name}: ${kind} ${stats.uid}:${stats.gid}${kind === 'link' ? '' : ` ${(stats.mode & 0o7777).toString(8)}`}`,
      )
      if (stats.isDirectory()) await walk(join(directory, name), `${prefix}${name}/`)
    }
  }
  await walk(root, '')
  return lines
}

describe('sealOutputs', () => {
  let root: string
  afterEach(() => {
    // GNU rm walks by descriptor: a tree deeper than PATH_MAX goes too.
    execFileSync('rm', ['-rf', '--', root])
  })

  it('removes FIFOs and links out, clears set-id bits, keeps the rest', async () => {
    root = await mkdtemp(join(tmpdir(), 'cordon-seal-unit-'))
    execFileSync('mkfifo', [join(root, 'fifo')])
    await writeFile(join(root, 'tool'), '#!/bin/sh\n')
    await chmod(join(root, 'tool'), 0o4755)
    await mkdir(join(root, 'dir/sub'), { recursive: true })
    await chmod(join(root, 'dir'), 0o2755)
    await symlink('/etc/passwd', join(root, 'dir/absolute'))
    await symlink('../../..', join(root, 'dir/sub/up'))
    await symlink('../tool', join(root, 'dir/inside'))
    await writeFile(join(root, '..name-with-dots'), 'x')
    await symlink('..name-with-dots', join(root, 'dotted-link'))

    const report = sealOutputs([{ root }], { uid: SANDBOX_UID })

    expect(report).toEqual({
      removed: 3,
      modesCleared: 2,
      handedOver: 0,
      failures: 0,
      judgedByText: false,
    })
    expect((await readdir(root)).sort()).toEqual(['..name-with-dots', 'dir', 'dotted-link', 'tool'])
    expect((await readdir(join(root, 'dir'))).sort()).toEqual(['inside', 'sub'])
    expect(await readdir(join(root, 'dir/sub'))).toEqual([])
    expect((await lstat(join(root, 'tool'))).mode & 0o7777).toBe(0o755)
    expect((await lstat(join(root, 'dir'))).mode & 0o7777).toBe(0o755)
  })

  it('judges a link by where it resolves: a chain of links that each stay in, climbing out, is removed', async () => {
    root = await mkdtemp(join(tmpdir(), 'cordon-seal-chain-'))
    // l0 -> ., lN -> l(N-1)/.. : each text alone stays in; the kernel climbs N levels.
    await symlink('.', join(root, 'l0'))
    for (let level = 1; level <= 10; level++)
      await symlink(`l${level - 1}/..`, join(root, `l${level}`))
    await symlink('l10/etc/shadow', join(root, 'shadow'))
    // The kernel really does leave the directory through it.
    expect(await realpath(join(root, 'l10'))).not.toContain(root)

    sealOutputs([{ root }], { uid: SANDBOX_UID })

    expect((await readdir(root)).sort()).toEqual(['l0'])
  })

  it('judges and removes a link deeper than PATH_MAX through its directory, and keeps one that stays in there', async () => {
    root = await mkdtemp(join(tmpdir(), 'cordon-seal-deep-'))
    // 18 directories of 250-character names: the deepest entries' paths from
    // the root are over 4,500 bytes, past PATH_MAX (4,096). Made through
    // descriptors, one level at a time, as a sandbox's process would.
    const names = Array.from(
      { length: 18 },
      (_, level) => `${String(level).padStart(2, '0')}${'d'.repeat(248)}`,
    )
    expect([root, ...names].join('/').length).toBeGreaterThan(4_096)
    const atBottom = <T>(use: (directory: string) => T): T => {
      let fd = openSync(root, constants.O_RDONLY | constants.O_DIRECTORY)
      try {
        for (const name of names) {
          const at = `/proc/self/fd/${fd}/${name}`
          if (!existsSync(at)) mkdirSync(at)
          const next = openSync(at, constants.O_RDONLY | constants.O_DIRECTORY)
          closeSync(fd)
          fd = next
        }
        return use(`/proc/self/fd/${fd}`)
      } finally {
        closeSync(fd)
      }
    }
    atBottom((bottom) => {
      symlinkSync(`${'../'.repeat(60)}etc/passwd`, `${bottom}/out`)
      symlinkSync(`nowhere/${'../'.repeat(20)}outside`, `${bottom}/up`)
      symlinkSync(`../${names[16]}`, `${bottom}/in`)
    })

    const report = sealOutputs([{ root }], { uid: SANDBOX_UID })

    expect(report).toMatchObject({ removed: 2, failures: 0 })
    expect(atBottom((bottom) => readdirSync(bottom))).toEqual(['in'])
  })

  it('follows links through subdirectories and links to links, keeping those that stay inside', async () => {
    root = await mkdtemp(join(tmpdir(), 'cordon-seal-through-'))
    await mkdir(join(root, 'a/b'), { recursive: true })
    await writeFile(join(root, 'a/b/data'), 'x')
    // A link to a directory, then a path through it that climbs: out.
    await symlink('a/b', join(root, 'deep'))
    await symlink('deep/../../..', join(root, 'through-deep')) // root/a/b/../../.. = parent of root
    // A link to a link that leads out: both out.
    await symlink('/etc', join(root, 'a/etc'))
    await symlink('a/etc/passwd', join(root, 'via-link'))
    // Links that stay inside, through links and subdirectories: kept.
    await symlink('deep/data', join(root, 'data-link'))
    await symlink('../../data-link', join(root, 'a/b/back'))
    await symlink('b/../b/data', join(root, 'a/sideways'))
    // A loop resolves to nothing; judged as leading nowhere safe.
    await symlink('loop-b', join(root, 'loop-a'))
    await symlink('loop-a', join(root, 'loop-b'))
    // Missing components are taken as directories that may appear: out.
    await symlink('missing/../../outside', join(root, 'dangling-out'))
    await symlink('missing/inside', join(root, 'dangling-in'))

    sealOutputs([{ root }], { uid: SANDBOX_UID })

    expect((await readdir(root)).sort()).toEqual(['a', 'dangling-in', 'data-link', 'deep'])
    expect((await readdir(join(root, 'a'))).sort()).toEqual(['b', 'sideways'])
    expect((await readdir(join(root, 'a/b'))).sort()).toEqual(['back', 'data'])
  })

  it('judges a tree made to be slow to judge: deep, with long targets, every verdict precise', async () => {
    // The attack that outlasted destroy()'s wait: 300 nested directories and
    // links whose targets are `x/../` 800 times. Reaching each step's
    // directory from the root cost the old seal 300 opens a step, about 14
    // million for these 60 links; the escaping link beside them was never
    // removed because the agent was killed first.
    root = await mkdtemp(join(tmpdir(), 'cordon-seal-slow-'))
    const names = Array.from({ length: 300 }, () => 'd')
    const bottom = join(root, ...names)
    mkdirSync(bottom, { recursive: true })
    for (let index = 0; index < 60; index++)
      symlinkSync('x/../'.repeat(800), join(bottom, `slow${index}`))
    // Stays in only through `..`: kept only if judged by where it resolves.
    symlinkSync(`${'../'.repeat(300)}kept.txt`, join(bottom, 'climbs-in'))
    symlinkSync(`${'../'.repeat(301)}etc`, join(bottom, 'climbs-out'))
    await writeFile(join(root, 'kept.txt'), 'kept')
    await symlink('/etc/shadow', join(root, 'shadow'))

    const report = sealOutputs([{ root }], { uid: SANDBOX_UID })

    expect(report).toMatchObject({ removed: 2, failures: 0, judgedByText: false })
    expect(existsSync(join(root, 'shadow'))).toBe(false)
    const left = readdirSync(bottom).sort()
    expect(left).toContain('climbs-in')
    expect(left).not.toContain('climbs-out')
    expect(left.filter((name) => name.startsWith('slow'))).toHaveLength(60)
  })

  it('past its deadline, judges the remaining links by their text: kept only if relative with no `..`', async () => {
    root = await mkdtemp(join(tmpdir(), 'cordon-seal-late-'))
    await mkdir(join(root, 'a/b'), { recursive: true })
    await writeFile(join(root, 'a/b/data'), 'data')
    await symlink('a/b/data', join(root, 'down'))
    await symlink('./a//b/', join(root, 'down-dir'))
    await symlink('down-dir/data', join(root, 'through-link'))
    // Inside, but only `..` says so: removed once the text is all that is read.
    await symlink('../data', join(root, 'a/b/up-in'))
    await symlink('../../../etc', join(root, 'a/out'))
    await symlink('/etc/shadow', join(root, 'a/b/absolute'))

    const report = sealOutputs([{ root }], { uid: SANDBOX_UID, preciseJudgingMs: 0 })

    expect(report).toMatchObject({ removed: 3, failures: 0, judgedByText: true })
    expect((await readdir(root)).sort()).toEqual(['a', 'down', 'down-dir', 'through-link'])
    expect((await readdir(join(root, 'a'))).sort()).toEqual(['b'])
    expect((await readdir(join(root, 'a/b'))).sort()).toEqual(['data'])
  })

  it('resolvesInside: a component-by-component model of the kernel', async () => {
    root = await mkdtemp(join(tmpdir(), 'cordon-seal-model-'))
    await mkdir(join(root, 'x/y'), { recursive: true })
    await symlink('..', join(root, 'x/up'))
    expect(resolvesInside(root, [], 'x/y/../y')).toBe(true)
    expect(resolvesInside(root, ['x'], '..')).toBe(true)
    expect(resolvesInside(root, ['x'], '../..')).toBe(false)
    expect(resolvesInside(root, [], 'x/up/x/up/x')).toBe(true)
    expect(resolvesInside(root, [], 'x/up/..')).toBe(false)
    expect(resolvesInside(root, ['x', 'y'], '../up/y')).toBe(true)
    expect(resolvesInside(root, [], '/anything')).toBe(false)
  })

  it('sees into directories the sandbox made unreadable, and hands everything its user left to the directory owner', async () => {
    root = await mkdtemp(join(tmpdir(), 'cordon-seal-handover-'))
    await chmod(root, 0o1777)
    await lchown(root, HOST_USER.uid, HOST_USER.gid)
    await mkdir(join(root, 'hidden/deeper'), { recursive: true })
    await writeFile(join(root, 'hidden/deeper/result.txt'), 'ok')
    await symlink('/etc/shadow', join(root, 'hidden/deeper/shadow'))
    await symlink('result.txt', join(root, 'hidden/deeper/kept'))
    await writeFile(join(root, 'top.txt'), 'top')
    await writeFile(join(root, 'host-own.txt'), 'the host made this one')
    for (const path of [
      'hidden',
      'hidden/deeper',
      'hidden/deeper/result.txt',
      'hidden/deeper/shadow',
      'hidden/deeper/kept',
      'top.txt',
    ])
      await lchown(join(root, path), SANDBOX_UID, SANDBOX_UID)
    await lchown(join(root, 'host-own.txt'), 777, 777)
    // Write-only and unreadable: listed and walked all the same.
    await chmod(join(root, 'hidden/deeper'), 0o000)
    await chmod(join(root, 'hidden'), 0o300)

    const report = sealOutputs([{ root }], { uid: SANDBOX_UID })

    expect(report).toEqual({
      removed: 1,
      modesCleared: 0,
      handedOver: 5,
      failures: 0,
      judgedByText: false,
    })
    expect(await describeTree(root)).toEqual([
      'hidden: dir 4321:4322 300',
      'hidden/deeper: dir 4321:4322 0',
      'hidden/deeper/kept: link 4321:4322',
      'hidden/deeper/result.txt: file 4321:4322 644',
      'host-own.txt: file 777:777 644',
      'top.txt: file 4321:4322 644',
    ])
  })

  it('hands over to the owner the host named instead', async () => {
    root = await mkdtemp(join(tmpdir(), 'cordon-seal-named-'))
    await writeFile(join(root, 'out.txt'), 'x')
    await lchown(join(root, 'out.txt'), SANDBOX_UID, SANDBOX_UID)
    const report = sealOutputs([{ root, handOverTo: { uid: 2000, gid: 2001 } }], {
      uid: SANDBOX_UID,
    })
    expect(report.handedOver).toBe(1)
    expect(await describeTree(root)).toEqual(['out.txt: file 2000:2001 644'])
  })
})

describe('the hand-over settings', () => {
  const base = {
    [AGENT_ENV.listen]: 'stdio',
    [AGENT_ENV.secretStdin]: '1',
    [AGENT_ENV.runAs]: '1000:1000',
    [AGENT_ENV.quiet]: '1',
  }

  it('reads root=uid,gid per sealed root, and refuses one for a root it does not seal', () => {
    const config = readAgentConfig({
      ...base,
      [AGENT_ENV.sealRoots]: '/out:/other',
      [AGENT_ENV.handOver]: '/out/=1000,1001',
    })
    expect(config.sealRoots).toEqual([
      { root: '/out', handOverTo: { uid: 1000, gid: 1001 } },
      { root: '/other' },
    ])
    expect(() =>
      readAgentConfig({
        ...base,
        [AGENT_ENV.sealRoots]: '/out',
        [AGENT_ENV.handOver]: '/elsewhere=1,1',
      }),
    ).toThrow(/not one of CORDON_AGENT_SEAL_ROOTS/)
    expect(() =>
      readAgentConfig({ ...base, [AGENT_ENV.sealRoots]: '/out', [AGENT_ENV.handOver]: '/out=x' }),
    ).toThrow(/CORDON_AGENT_HAND_OVER/)
  })
})
