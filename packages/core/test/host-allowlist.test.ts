import fc from 'fast-check'
import { describe, expect, it } from 'vitest'
import { compileAllowlist, normalizeHostname, parseAllowlistEntry } from '../src/backend-kit.js'
import { isHostAllowed } from '../src/index.js'

describe('host allowlist', () => {
  it('matches exact hosts and leading-dot domains', () => {
    expect(isHostAllowed('api.example.com', ['api.example.com'])).toBe(true)
    expect(isHostAllowed('www.example.com', ['api.example.com'])).toBe(false)
    expect(isHostAllowed('example.com', ['.example.com'])).toBe(true)
    expect(isHostAllowed('a.b.example.com', ['.example.com'])).toBe(true)
  })

  it('is case-insensitive and ignores one trailing dot on either side', () => {
    expect(isHostAllowed('API.Example.COM.', ['api.example.com'])).toBe(true)
    expect(isHostAllowed('api.example.com', ['API.EXAMPLE.COM.'])).toBe(true)
  })

  it('never matches substrings, suffixes without a dot, or wildcards', () => {
    expect(isHostAllowed('badexample.com', ['.example.com'])).toBe(false)
    expect(isHostAllowed('example.com.evil.net', ['.example.com'])).toBe(false)
    expect(isHostAllowed('evil.net', ['*'])).toBe(false)
    expect(isHostAllowed('a.example.com', ['*.example.com'])).toBe(false)
    expect(isHostAllowed('example.com', [])).toBe(false)
  })

  it('compares internationalized names in punycode', () => {
    expect(normalizeHostname('bücher.de')).toBe('xn--bcher-kva.de')
    expect(isHostAllowed('xn--bcher-kva.de', ['bücher.de'])).toBe(true)
    expect(isHostAllowed('BÜCHER.de', ['.xn--bcher-kva.de'])).toBe(true)
  })

  it('rejects entries with ports, paths, credentials or empty labels', () => {
    for (const bad of [
      '',
      '.',
      'a..b',
      'host:443',
      'host/path',
      'user@host',
      'http://host',
      ' ',
      '..example.com',
      '-a.com',
    ]) {
      expect(parseAllowlistEntry(bad), bad).toBeUndefined()
    }
    expect(parseAllowlistEntry('.Example.com')).toEqual({ kind: 'domain', host: 'example.com' })
  })
})

describe('normalizeHostname edge cases', () => {
  it('accepts one trailing dot and refuses two', () => {
    expect(normalizeHostname('example.com.')).toBe('example.com')
    expect(normalizeHostname('example.com..')).toBeUndefined()
  })
})

describe('compiled allowlist', () => {
  /** The rule as written in the docs: every entry parsed at the time of the check. */
  function allowedByEachEntry(host: string, allowedHosts: readonly string[]): boolean {
    const subject = normalizeHostname(host)
    if (subject === undefined) return false
    return allowedHosts.some((raw) => {
      const entry = parseAllowlistEntry(raw)
      if (entry === undefined) return false
      if (entry.kind === 'exact') return subject === entry.host
      return subject === entry.host || subject.endsWith(`.${entry.host}`)
    })
  }

  it('answers exactly as checking each entry does', () => {
    const label = fc.constantFrom(
      'a',
      'b',
      'ex',
      'example',
      'com',
      'B',
      'xn--bcher-kva',
      'bücher',
      '1',
      '0x7f',
      '',
    )
    const name = fc.array(label, { minLength: 1, maxLength: 4 }).map((labels) => labels.join('.'))
    const entry = fc
      .tuple(fc.constantFrom('', '.', '*.'), name, fc.constantFrom('', '.'))
      .map(([prefix, host, suffix]) => `${prefix}${host}${suffix}`)
    fc.assert(
      fc.property(
        fc.array(entry, { maxLength: 6 }),
        fc.array(name, { maxLength: 6 }),
        (list, hosts) => {
          const compiled = compileAllowlist(list)
          for (const host of [...hosts, ...list]) {
            expect(compiled.allows(host), `${host} against ${JSON.stringify(list)}`).toBe(
              allowedByEachEntry(host, list),
            )
          }
        },
      ),
      { numRuns: 500 },
    )
  })

  it('keeps the list it was compiled from, not later changes to the array', () => {
    const list = ['.example.com']
    const compiled = compileAllowlist(list)
    list.push('evil.net')
    expect(compiled.allows('evil.net')).toBe(false)
    expect(compiled.allows('a.example.com')).toBe(true)
  })
})
