/**
 * Property tests for allowlist matching as the proxy uses it: core's
 * `isHostAllowed`, re-exported from this package.
 */
import * as core from '@cordon/core'
import fc from 'fast-check'
import { describe, expect, it } from 'vitest'
import { isHostAllowed } from '../src/index.js'

// Hyphens in the third and fourth places mark a label as an encoded one
// (`xn--`, RFC 5891 §4.2.3.1); most such labels are invalid punycode, which
// core refuses as a name (tested on its own below), so the generators leave
// them out.
const notReserved = (text: string) => text.slice(2, 4) !== '--'
const label = fc.stringMatching(/^[a-z0-9]([a-z0-9-]{0,10}[a-z0-9])?$/).filter(notReserved)
// The last label starts with a letter: a name ending in a number is an IPv4
// literal to every URL parser, and core refuses it as a name.
const topLabel = fc.stringMatching(/^[a-z]([a-z0-9-]{0,8}[a-z0-9])?$/).filter(notReserved)
const name = fc
  .tuple(fc.array(label, { minLength: 1, maxLength: 3 }), topLabel)
  .map(([labels, top]) => [...labels, top].join('.'))

function randomCase(text: string, seed: number): string {
  return [...text]
    .map((char, index) => ((seed >> (index % 31)) & 1 ? char.toUpperCase() : char))
    .join('')
}

describe('isHostAllowed', () => {
  it('is core’s implementation, not a copy', () => {
    expect(isHostAllowed).toBe(core.isHostAllowed)
  })

  it('an exact entry matches its host in any case, with or without a trailing dot', () => {
    fc.assert(
      fc.property(name, fc.integer(), fc.boolean(), (host, seed, dot) => {
        expect(isHostAllowed(`${randomCase(host, seed)}${dot ? '.' : ''}`, [host])).toBe(true)
        expect(isHostAllowed(host, [`${randomCase(host, seed)}${dot ? '.' : ''}`])).toBe(true)
      }),
    )
  })

  it('an exact entry never matches a subdomain or a parent', () => {
    fc.assert(
      fc.property(label, name, (sub, host) => {
        expect(isHostAllowed(`${sub}.${host}`, [host])).toBe(false)
        expect(isHostAllowed(host, [`${sub}.${host}`])).toBe(false)
      }),
    )
  })

  it('an invalid encoded label matches nothing, not even itself (fails closed)', () => {
    expect(isHostAllowed('xn--0.a', ['xn--0.a'])).toBe(false)
    expect(isHostAllowed('xn--0.a', ['.xn--0.a'])).toBe(false)
    expect(isHostAllowed('www.xn--0.a', ['.a'])).toBe(false)
  })

  it('a leading-dot entry matches the domain and every subdomain', () => {
    fc.assert(
      fc.property(fc.array(label, { maxLength: 3 }), name, (subs, domain) => {
        const host = [...subs, domain].join('.')
        expect(isHostAllowed(host, [`.${domain}`])).toBe(true)
      }),
    )
  })

  it('never matches by substring or suffix without a label boundary', () => {
    fc.assert(
      fc.property(label, name, (prefix, domain) => {
        expect(isHostAllowed(`${prefix}${domain}`, [`.${domain}`])).toBe(false)
        expect(isHostAllowed(`${domain}.${prefix}.evil`, [`.${domain}`])).toBe(false)
        expect(isHostAllowed(domain.slice(1), [domain])).toBe(false)
      }),
    )
  })

  it('treats * as no pattern at all', () => {
    fc.assert(
      fc.property(name, (host) => {
        expect(isHostAllowed(host, ['*'])).toBe(false)
        expect(isHostAllowed(host, [`*.${host.split('.').slice(1).join('.')}`])).toBe(false)
      }),
    )
  })

  it('an empty list allows nothing', () => {
    fc.assert(
      fc.property(fc.oneof(name, fc.string()), (host) => {
        expect(isHostAllowed(host, [])).toBe(false)
      }),
    )
  })

  it('compares internationalised names in punycode', () => {
    expect(isHostAllowed('bücher.example', ['xn--bcher-kva.example'])).toBe(true)
    expect(isHostAllowed('xn--bcher-kva.example', ['bücher.example'])).toBe(true)
    expect(isHostAllowed('BÜCHER.example', ['.xn--bcher-kva.example'])).toBe(true)
  })
})
