import { describe, expect, it } from 'vitest'
import { normalizeHostname, parseAllowlistEntry } from '../src/backend-kit.js'
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
