import { readFileSync } from 'node:fs'
import { expect, it } from 'vitest'
import { localBackend } from '../src/index.js'

/** Code without its comments and with every run of whitespace one space. */
function normalized(code: string): string {
  return code
    .replace(/\/\/[^\n]*/g, '')
    .replace(/\s+/g, ' ')
    .trim()
}

/** The `defineBackend<LocalBackendConfig>({ ... })` statement in `text`. */
function definitionIn(text: string): string {
  const start = text.indexOf('export const localBackend = defineBackend<LocalBackendConfig>({')
  expect(start, 'the definition is in the text').toBeGreaterThanOrEqual(0)
  const end = text.indexOf('\n})', start)
  return text.slice(start, end + 3)
}

// CONTRIBUTING.md shows this backend's definition whole, as the one to copy:
// it must be the code that runs (every enforcement field included), not a
// sketch of it that no longer compiles.
it("CONTRIBUTING.md's definition example is process:local's definition, comments aside", () => {
  const guide = readFileSync(new URL('../../../CONTRIBUTING.md', import.meta.url), 'utf8')
  const source = readFileSync(new URL('../src/definition.ts', import.meta.url), 'utf8')
  expect(localBackend.name).toBe('process:local')
  expect(normalized(definitionIn(guide))).toBe(
    normalized(definitionIn(source).replace('name: BACKEND_NAME,', "name: 'process:local',")),
  )
})
