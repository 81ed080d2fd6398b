import fc from 'fast-check'
import { describe, expect, it } from 'vitest'
import {
  checkHostHeaders,
  normalizeTargetHost,
  parseAuthority,
  policySubject,
} from '../src/authority.js'
import { splitAuthority } from '../src/index.js'

describe("splitAuthority, the reference's shape", () => {
  it('returns { host, port? } and never undefined', () => {
    expect(splitAuthority('example.com:443')).toEqual({ host: 'example.com', port: 443 })
    expect(splitAuthority('example.com')).toEqual({ host: 'example.com' })
    expect(splitAuthority('[::1]:8080')).toEqual({ host: '::1', port: 8080 })
    expect(splitAuthority('example.com')).not.toHaveProperty('port')
  })

  it('gives an empty host, which no allowlist matches, for anything not plain', () => {
    for (const input of ['user@example.com:443', 'example.com:0', '::1:443', 'exa mple.com', '']) {
      expect(splitAuthority(input)).toEqual({ host: '' })
    }
  })
})

describe('parseAuthority (what the proxy dials)', () => {
  it.each([
    ['example.com:443', { host: 'example.com', port: 443 }],
    ['example.com', { host: 'example.com', port: undefined }],
    ['[::1]:8080', { host: '::1', port: 8080 }],
    ['[fe80::1%25eth0]:80', { host: 'fe80::1%25eth0', port: 80 }],
    ['EXAMPLE.com:0443', { host: 'EXAMPLE.com', port: 443 }],
  ])('%s', (input, expected) => {
    expect(parseAuthority(input)).toEqual(expected)
  })

  it('fills a default port only when none was named', () => {
    expect(parseAuthority('example.com', 80)).toEqual({ host: 'example.com', port: 80 })
    expect(parseAuthority('example.com:8080', 80)).toEqual({ host: 'example.com', port: 8080 })
  })

  it.each([
    '',
    'user@example.com:443',
    'user:pass@example.com',
    '::1:443',
    '[::1',
    '[::1]x',
    '[example.com]:80',
    'example.com:',
    'example.com:0',
    'example.com:65536',
    'example.com:+443',
    'example.com:44 3',
    'example.com:443/path',
    'exa mple.com',
    'example.com\r\n:443',
    ':443',
    'a\\b:443',
  ])('refuses %j', (input) => {
    expect(parseAuthority(input)).toBeUndefined()
  })

  it('round-trips any valid host and port', () => {
    fc.assert(
      fc.property(fc.domain(), fc.integer({ min: 1, max: 65535 }), (host, port) => {
        expect(parseAuthority(`${host}:${port}`)).toEqual({ host, port })
      }),
    )
    fc.assert(
      fc.property(fc.ipV6(), fc.integer({ min: 1, max: 65535 }), (host, port) => {
        expect(parseAuthority(`[${host}]:${port}`)).toEqual({ host, port })
      }),
    )
  })

  it('never accepts a port outside 1..65535 or user info, whatever the input', () => {
    fc.assert(
      fc.property(fc.string({ maxLength: 40 }), (input) => {
        const result = parseAuthority(input)
        if (result === undefined) return
        expect(input.includes('@')).toBe(false)
        if (result.port !== undefined) {
          expect(result.port).toBeGreaterThanOrEqual(1)
          expect(result.port).toBeLessThanOrEqual(65535)
        }
      }),
      { numRuns: 2_000 },
    )
  })
})

describe('normalizeTargetHost', () => {
  it.each([
    ['Example.COM.', 'example.com'],
    ['bücher.example', 'xn--bcher-kva.example'],
    ['0x7f.1', '127.0.0.1'],
    ['::ffff:127.0.0.1', '127.0.0.1'],
    ['[::1]', '::1'],
    // IDNA maps full-width digits and ideographic dots to an IPv4 literal;
    // it must come out as the address, not as a name to resolve.
    ['１２７．０．０．１', '127.0.0.1'],
    ['127。0。0。1', '127.0.0.1'],
  ])('%s → %s', (input, expected) => {
    expect(policySubject(normalizeTargetHost(input)!)).toBe(expected)
  })

  it('treats what IDNA turns into an address as an address', () => {
    expect(normalizeTargetHost('１２７．０．０．１')?.kind).toBe('ip')
  })

  it.each(['1.2.3.4.5', 'foo.0x1', '*.example.com', 'a..b', '256.1.1.1', 'exa_mple.com%00'])(
    'refuses %s',
    (input) => {
      expect(normalizeTargetHost(input)).toBeUndefined()
    },
  )
})

describe('checkHostHeaders', () => {
  const target = normalizeTargetHost('api.example.com')!

  it('accepts no Host header, or one that names the same host and port', () => {
    expect(checkHostHeaders([], target, 80, 80)).toBe('ok')
    expect(checkHostHeaders(['Host', 'API.example.com'], target, 80, 80)).toBe('ok')
    expect(checkHostHeaders(['host', 'api.example.com.:80'], target, 80, 80)).toBe('ok')
  })

  it('refuses a different host, a different port, or two Host headers', () => {
    expect(checkHostHeaders(['Host', 'internal.example.com'], target, 80, 80)).toBe('host-mismatch')
    expect(checkHostHeaders(['Host', 'api.example.com:8080'], target, 80, 80)).toBe('host-mismatch')
    expect(
      checkHostHeaders(['Host', 'api.example.com', 'Host', 'api.example.com'], target, 80, 80),
    ).toBe('host-mismatch')
    expect(checkHostHeaders(['Host', 'user@api.example.com'], target, 80, 80)).toBe('bad-request')
  })
})
