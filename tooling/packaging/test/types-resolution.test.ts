import { mkdtempSync, readFileSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { checkPackage, createPackageFromTarballData } from '@arethetypeswrong/core'
import { afterAll, describe, expect, it } from 'vitest'
import { packPackage } from './pack.js'
import { publishablePackages } from './publishable-packages.js'

const publishable = publishablePackages()
const packDir = mkdtempSync(join(tmpdir(), 'cordon-attw-'))

afterAll(() => rmSync(packDir, { recursive: true, force: true }))

/**
 * "Are the types wrong?" on the tarball npm would publish. cordon ships ESM
 * only, so CommonJS `require` resolution is not expected to work; every other
 * problem (missing types, masquerading formats, unresolvable subpaths) fails.
 */
describe('type resolution of every publishable package (arethetypeswrong)', () => {
  for (const { dir, manifest } of publishable) {
    it(`${manifest.name} resolves its types under node16 ESM and bundlers`, async () => {
      const tarball = packPackage({ dir, manifest }, packDir)
      const pkg = createPackageFromTarballData(new Uint8Array(readFileSync(tarball)))
      const result = await checkPackage(pkg)
      const problems = 'problems' in result ? result.problems : []
      const relevant = problems.filter((problem) => {
        if (
          'resolutionKind' in problem &&
          (problem.resolutionKind === 'node10' || problem.resolutionKind === 'node16-cjs')
        )
          return false
        if (problem.kind === 'CJSResolvesToESM') return false
        // Bundled programs (the agent, the gateway) are exported as files to run or copy, not modules to type.
        if (
          problem.kind === 'UntypedResolution' &&
          'entrypoint' in problem &&
          /\.[mc]js$/.test(problem.entrypoint)
        )
          return false
        // Data files (the OpenAPI document) are exported for readers, not for import.
        if ('entrypoint' in problem && /\.(ya?ml|json)$/.test(problem.entrypoint)) return false
        return true
      })
      expect(relevant).toEqual([])
    })
  }
})
