import { readFileSync } from 'node:fs'
import { fileURLToPath } from 'node:url'
import { describe, expect, it } from 'vitest'

/**
 * The bundled programs are minified (less for Node to parse and hold before
 * the agent's first answer, see scripts/bundle-agent.mjs), each with a source
 * map beside it that leads a stack trace back to src/.
 */
describe('the bundled agent programs', () => {
  for (const file of ['cordon-agent.mjs', 'cordon-agent.cjs']) {
    it(`${file} is minified and has a source map into src/`, () => {
      const path = fileURLToPath(new URL(`../dist/${file}`, import.meta.url))
      const program = readFileSync(path, 'utf8')
      // Minified: a few long lines, not thousands of short ones.
      expect(program.split('\n').length).toBeLessThan(20)
      expect(program).toContain(`//# sourceMappingURL=${file}.map`)
      const map = JSON.parse(readFileSync(`${path}.map`, 'utf8')) as { sources: string[] }
      expect(map.sources.some((source) => source.endsWith('src/agent.ts'))).toBe(true)
      expect(map.sources.some((source) => source.endsWith('src/agent-server.ts'))).toBe(true)
    })

    it(`${file} does not load node:crypto as it starts (6 ms of every create; protocol/sha256.ts)`, () => {
      const program = readFileSync(
        fileURLToPath(new URL(`../dist/${file}`, import.meta.url)),
        'utf8',
      )
      expect(program).toMatch(/["']node:net["']/)
      expect(program).not.toMatch(/(require\(|from)\s*["'](node:)?crypto["']/)
    })
  }
})
