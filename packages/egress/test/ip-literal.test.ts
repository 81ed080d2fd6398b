import fc from 'fast-check'
import { describe, expect, it } from 'vitest'
import { looksLikeIpLiteral, parseIpLiteral, unwrapMappedIpv4 } from '../src/ip-literal.js'

/** What the WHATWG URL parser (and so browsers, fetch and undici) reads a host as. */
function urlHostname(host: string): string | undefined {
  try {
    return new URL(`http://${host}/`).hostname
  } catch {
    return undefined
  }
}

describe('parseIpLiteral: IPv4 spellings', () => {
  it.each([
    ['127.0.0.1', '127.0.0.1'],
    ['0x7f.1', '127.0.0.1'],
    ['0x7f.0.0.1', '127.0.0.1'],
    ['2130706433', '127.0.0.1'],
    ['0177.0.0.1', '127.0.0.1'],
    ['017700000001', '127.0.0.1'],
    ['127.1', '127.0.0.1'],
    ['127.0.1', '127.0.0.1'],
    ['0x7F000001', '127.0.0.1'],
    ['0', '0.0.0.0'],
    ['0x', '0.0.0.0'],
    ['10.0.0.1.', '10.0.0.1'],
    ['0xa9.0xfe.0xa9.0xfe', '169.254.169.254'],
    ['169.254.43518', '169.254.169.254'],
    ['0251.0376.0251.0376', '169.254.169.254'],
    ['00000000000000000000000000127.1', '87.0.0.1'],
    ['0x00000000000000000000000007f.1', '127.0.0.1'],
    ['4294967295', '255.255.255.255'],
  ])('%s is %s', (input, expected) => {
    expect(parseIpLiteral(input)).toEqual({ address: expected, family: 4 })
  })

  it.each([
    '4294967296',
    '256.0.0.1',
    '1.2.3.4.5',
    '1..2',
    '08.1',
    '0x1g',
    '1.2.3.256',
    '1.16777216',
    '-1',
    '',
    'example.com',
  ])('%s is not an IPv4 literal', (input) => {
    expect(parseIpLiteral(input)).toBeUndefined()
  })

  it('agrees with the URL standard on every spelling fast-check can produce', () => {
    fc.assert(
      fc.property(fc.ipV4Extended(), (spelling) => {
        expect(parseIpLiteral(spelling)?.address).toBe(urlHostname(spelling))
      }),
      { numRuns: 2_000 },
    )
  })

  it('reads every random spelling of an address as that address', () => {
    const part = (value: number, radix: 8 | 10 | 16): string =>
      radix === 16
        ? `0x${value.toString(16)}`
        : radix === 8
          ? `0${value.toString(8)}`
          : String(value)
    fc.assert(
      fc.property(
        fc.integer({ min: 0, max: 0xffffffff }),
        fc.integer({ min: 1, max: 4 }),
        fc.array(fc.constantFrom<8 | 10 | 16>(8, 10, 16), { minLength: 4, maxLength: 4 }),
        (value, count, radices) => {
          const bytes = [value >>> 24, (value >>> 16) & 255, (value >>> 8) & 255, value & 255]
          const leading = bytes.slice(0, count - 1)
          const rest = bytes.slice(count - 1).reduce((sum, byte) => sum * 256 + byte, 0)
          const spelling = [...leading, rest].map((n, index) => part(n, radices[index]!)).join('.')
          expect(parseIpLiteral(spelling)?.address).toBe(bytes.join('.'))
        },
      ),
      { numRuns: 2_000 },
    )
  })
})

describe('parseIpLiteral: IPv6', () => {
  it.each([
    ['::1', '::1'],
    ['[::1]', '::1'],
    ['0:0:0:0:0:0:0:1', '::1'],
    ['::ffff:127.0.0.1', '::ffff:7f00:1'],
    ['::FFFF:7F00:1', '::ffff:7f00:1'],
    ['fe80::1%eth0', 'fe80::1'],
    ['[fe80::1%25eth0]', 'fe80::1'],
    ['2001:db8:0:0:1:0:0:1', '2001:db8::1:0:0:1'],
    ['64:ff9b::10.0.0.1', '64:ff9b::a00:1'],
  ])('%s is %s', (input, expected) => {
    expect(parseIpLiteral(input)?.address).toBe(expected)
    expect(parseIpLiteral(input)?.family).toBe(6)
  })

  it('keeps the zone id apart from the address', () => {
    expect(parseIpLiteral('[fe80::1%25eth0]')).toEqual({
      address: 'fe80::1',
      family: 6,
      zone: 'eth0',
    })
  })

  it.each([
    ':::',
    '1::2::3',
    '12345::',
    '::1.2.3',
    '::256.0.0.1',
    '[::1',
    '1:2:3:4:5:6:7:8:9',
    'fe80::1%',
  ])('%s is refused', (input) => {
    expect(parseIpLiteral(input)).toBeUndefined()
  })

  it('agrees with the URL standard on every IPv6 fast-check can produce', () => {
    fc.assert(
      fc.property(fc.ipV6(), (address) => {
        expect(`[${parseIpLiteral(address)?.address}]`).toBe(urlHostname(`[${address}]`))
      }),
      { numRuns: 2_000 },
    )
  })

  it('unwraps every mapped form to its IPv4 address', () => {
    fc.assert(
      fc.property(fc.ipV4(), (v4) => {
        const mapped = parseIpLiteral(`::ffff:${v4}`)!
        expect(unwrapMappedIpv4(mapped)).toEqual({ address: v4, family: 4 })
      }),
    )
  })
})

describe('looksLikeIpLiteral', () => {
  it.each(['1.2.3.4', '0x7f.1', 'foo.0x1', 'a.b.1', '[::1]', '::1', '1.2.3.4.'])(
    '%s must not go to DNS',
    (host) => {
      expect(looksLikeIpLiteral(host)).toBe(true)
    },
  )

  it.each(['example.com', '1a.example', '0x.example', 'xn--bcher-kva.example'])(
    '%s is a name',
    (host) => {
      expect(looksLikeIpLiteral(host)).toBe(false)
    },
  )

  it('matches the URL standard: a host it calls a name never parses as an IPv4 address there', () => {
    fc.assert(
      fc.property(fc.domain(), (domain) => {
        if (!looksLikeIpLiteral(domain)) {
          const parsed = urlHostname(domain)
          expect(parsed === undefined || !/^[0-9.]+$/.test(parsed)).toBe(true)
        }
      }),
    )
  })
})
