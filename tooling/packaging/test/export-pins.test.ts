import { describe, expect, it } from 'vitest'
import { moduleEntryPoints, pinnedLists, runtimeExports } from './export-lists.js'
import { publishablePackages } from './publishable-packages.js'

/**
 * Every entry point of every publishable package exports exactly the names
 * pinned in `exports.json`. Adding or removing a public name is a deliberate
 * change of this file (and a changeset), never an accident.
 */
describe('public export lists', () => {
  const pinned = pinnedLists()
  const seen = new Set<string>()
  for (const entry of publishablePackages()) {
    for (const [subpath, file] of moduleEntryPoints(entry)) {
      const name = entry.manifest.name + (subpath === '.' ? '' : subpath.slice(1))
      seen.add(name)
      it(`${name} exports the pinned list`, async () => {
        expect(await runtimeExports(file)).toEqual(pinned[name])
      })
    }
  }
  it('pins no entry point that does not exist', () => {
    expect(Object.keys(pinned).sort()).toEqual([...seen].sort())
  })
  it('the umbrella re-exports the whole host contract of core', () => {
    const core = pinned['@cordon/core'] ?? []
    const umbrella = new Set(pinned['@cordon/sandbox'])
    expect(core.filter((name) => !umbrella.has(name))).toEqual([])
  })
})
