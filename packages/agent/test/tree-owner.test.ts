import { lstat, mkdir, mkdtemp, rm, symlink, writeFile } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { afterEach, describe, expect, it } from 'vitest'
import { AGENT_ENV, readAgentConfig } from '../src/agent-config.js'
import { handTreesTo } from '../src/tree-owner.js'

/**
 * A read-write volume is handed to the sandbox's user before it starts
 * (CORDON_AGENT_OWN_ROOTS). Its proof from inside real sandboxes of two
 * uids is backend-docker's test/volumes.test.ts; here, the walk itself.
 */
const roots: string[] = []
afterEach(async () => {
  for (const root of roots.splice(0)) await rm(root, { recursive: true, force: true })
})

describe('handing a tree to the sandbox user', () => {
  it('re-owns every entry, links without following them, and counts what it changed', async () => {
    const root = await mkdtemp(join(tmpdir(), 'cordon-own-'))
    roots.push(root)
    const outside = await mkdtemp(join(tmpdir(), 'cordon-own-outside-'))
    roots.push(outside)
    await mkdir(join(root, 'a', 'b'), { recursive: true })
    await writeFile(join(root, 'a', 'b', 'file'), 'x')
    await symlink(outside, join(root, 'a', 'out'))
    const owner = { uid: 1_234_567, gid: 1_234_568 }
    expect(process.getuid?.()).toBe(0)
    expect(await handTreesTo([root], owner)).toBe(5)
    for (const path of [
      root,
      join(root, 'a'),
      join(root, 'a', 'b', 'file'),
      join(root, 'a', 'out'),
    ])
      expect(await lstat(path)).toMatchObject({ uid: owner.uid, gid: owner.gid })
    // The link's target is untouched.
    expect((await lstat(outside)).uid).toBe(0)
    // A second walk finds nothing to change.
    expect(await handTreesTo([root], owner)).toBe(0)
  })

  it('reads the roots from the environment, and needs a user to hand them to', () => {
    const base = {
      [AGENT_ENV.listen]: 'stdio',
      [AGENT_ENV.secretStdin]: '1',
      [AGENT_ENV.quiet]: '1',
    }
    const config = readAgentConfig({
      ...base,
      [AGENT_ENV.runAs]: '1000:1000',
      [AGENT_ENV.ownRoots]: '/data/:/more',
    })
    expect(config.ownRoots).toEqual(['/data', '/more'])
    expect(() => readAgentConfig({ ...base, [AGENT_ENV.ownRoots]: '/data' })).toThrow(
      /CORDON_AGENT_OWN_ROOTS needs CORDON_AGENT_RUN_AS/,
    )
  })
})
