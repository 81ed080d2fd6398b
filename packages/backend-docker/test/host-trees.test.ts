import { mkdtemp, rm, symlink } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { ContainerSandboxLayoutValidationError, SandboxConfigValidationError } from '@cordon/core'
import { engineLeftovers } from '@cordon/test-support'
import { describe, expect, it } from 'vitest'
import { testProvider } from './test-run.js'

/**
 * Host pseudo-filesystems and the engine's own trees are never mounted: a
 * writable `/proc` showed the sandbox the host's processes. The textual
 * check refuses them when the provider is made; a link to one is followed
 * at create, before any container exists.
 */
describe('host trees a layout may not mount (Docker)', () => {
  it.each(['/proc', '/var/run', '/sys', '/var/lib/docker'])(
    'refuses %s as outputs when the provider is made, naming the key, and makes nothing',
    async (hostPath) => {
      const made = (() => {
        try {
          return testProvider(
            {},
            { layout: { outputs: { source: { type: 'hostDir', hostPath } } } },
          )
        } catch (error) {
          return error
        }
      })()
      expect(ContainerSandboxLayoutValidationError.isInstance(made), String(made)).toBe(true)
      expect(
        (made as ContainerSandboxLayoutValidationError).issues.map((issue) => issue.path),
      ).toEqual(['layout.outputs.source.hostPath'])
      expect((await engineLeftovers()).containers).toEqual([])
    },
  )

  it('refuses a link to /proc at create, naming the key, before any container exists', async () => {
    const root = await mkdtemp(join(tmpdir(), 'cordon-host-tree-'))
    const link = join(root, 'x')
    await symlink('/proc', link)
    const provider = testProvider(
      {},
      { layout: { outputs: { source: { type: 'hostDir', hostPath: link } } } },
    )
    try {
      const refused = await provider.create().catch((error: unknown) => error)
      expect(SandboxConfigValidationError.isInstance(refused), String(refused)).toBe(true)
      expect((refused as SandboxConfigValidationError).issues).toEqual([
        expect.objectContaining({
          path: 'layout.outputs.source.hostPath',
          message: expect.stringContaining("would expose the host's /proc"),
        }),
      ])
    } finally {
      await provider.close()
      await rm(root, { recursive: true, force: true })
    }
    expect((await engineLeftovers()).containers).toEqual([])
  })
})
