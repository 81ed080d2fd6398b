import { execFileSync } from 'node:child_process'
import { chmod, lstat, mkdir, mkdtemp, readdir, rm, symlink, writeFile } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { afterEach, describe, expect, it } from 'vitest'
import { sealOutputs } from '../src/output-seal.js'
import { actAsItself } from '../src/user-identity.js'

describe('sealOutputs', () => {
  let root: string
  afterEach(async () => {
    await rm(root, { recursive: true, force: true })
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

    const report = sealOutputs([root], actAsItself)

    expect(report).toEqual({ removed: 3, modesCleared: 2, failures: 0 })
    expect((await readdir(root)).sort()).toEqual(['..name-with-dots', 'dir', 'dotted-link', 'tool'])
    expect((await readdir(join(root, 'dir'))).sort()).toEqual(['inside', 'sub'])
    expect(await readdir(join(root, 'dir/sub'))).toEqual([])
    expect((await lstat(join(root, 'tool'))).mode & 0o7777).toBe(0o755)
    expect((await lstat(join(root, 'dir'))).mode & 0o7777).toBe(0o755)
  })
})
