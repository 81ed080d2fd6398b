import fc from 'fast-check'
import { describe, expect, it } from 'vitest'
import {
  classifyAddress,
  classifyIpv4Value,
  classifyIpv6Value,
  isInwardExemptable,
  reasonForAddressClass,
} from '../src/address-screen.js'
import { formatIpv4 } from '../src/ip-literal.js'

/** Every IPv4 address inside `base/prefix`, drawn at random. */
function inV4(base: string, prefix: number) {
  const start = base.split('.').reduce((value, part) => value * 256 + Number(part), 0)
  const size = 2 ** (32 - prefix)
  return fc.integer({ min: 0, max: size - 1 }).map((offset) => formatIpv4(start + offset))
}

/** A random IPv6 address inside `prefixGroups::/prefix`, as eight hex groups. */
function inV6(base: readonly number[], prefix: number) {
  return fc
    .array(fc.integer({ min: 0, max: 0xffff }), { minLength: 8, maxLength: 8 })
    .map((random) => {
      let value = 0n
      for (let index = 0; index < 8; index += 1) value = (value << 16n) | BigInt(random[index]!)
      let baseValue = 0n
      for (let index = 0; index < 8; index += 1)
        baseValue = (baseValue << 16n) | BigInt(base[index] ?? 0)
      const hostBits = (1n << BigInt(128 - prefix)) - 1n
      const address = (baseValue & ~hostBits) | (value & hostBits)
      const groups: string[] = []
      for (let index = 7; index >= 0; index -= 1)
        groups.push(((address >> BigInt(index * 16)) & 0xffffn).toString(16))
      return groups.join(':')
    })
}

const v4Ranges: readonly [string, number, string][] = [
  ['0.0.0.0', 8, 'address-reserved'],
  ['10.0.0.0', 8, 'address-private'],
  ['100.64.0.0', 10, 'address-private'],
  ['127.0.0.0', 8, 'address-loopback'],
  ['169.254.0.0', 16, 'address-link-local'],
  ['172.16.0.0', 12, 'address-private'],
  ['192.168.0.0', 16, 'address-private'],
  ['198.18.0.0', 15, 'address-reserved'],
  ['224.0.0.0', 4, 'address-reserved'],
  ['240.0.0.0', 4, 'address-reserved'],
  ['192.0.2.0', 24, 'address-reserved'],
]

describe('classifyAddress: IPv4', () => {
  it.each(v4Ranges)('every address in %s/%i is refused as %s', (base, prefix, reason) => {
    fc.assert(
      fc.property(inV4(base, prefix), (address) => {
        expect(reasonForAddressClass(classifyAddress(address)!)).toBe(reason)
      }),
      { numRuns: 500 },
    )
  })

  it('refuses the broadcast address and the cloud metadata address', () => {
    expect(classifyAddress('255.255.255.255')).toBe('broadcast')
    expect(classifyAddress('169.254.169.254')).toBe('link-local')
  })

  it('lets ordinary public addresses through', () => {
    for (const address of [
      '8.8.8.8',
      '1.1.1.1',
      '93.184.216.34',
      '172.32.0.1',
      '100.128.0.1',
      '11.0.0.1',
    ]) {
      expect(classifyAddress(address)).toBe('public')
    }
  })

  it('classifies the boundaries of each range exactly', () => {
    expect(classifyAddress('172.15.255.255')).toBe('public')
    expect(classifyAddress('172.16.0.0')).toBe('private')
    expect(classifyAddress('172.31.255.255')).toBe('private')
    expect(classifyAddress('172.32.0.0')).toBe('public')
    expect(classifyAddress('100.63.255.255')).toBe('public')
    expect(classifyAddress('100.127.255.255')).toBe('shared')
    expect(classifyAddress('198.17.255.255')).toBe('public')
    expect(classifyAddress('198.19.255.255')).toBe('benchmarking')
    expect(classifyAddress('223.255.255.255')).toBe('public')
  })

  it('classifies every spelling of an address like the address', () => {
    expect(classifyAddress('0x7f.1')).toBe('loopback')
    expect(classifyAddress('2130706433')).toBe('loopback')
    expect(classifyAddress('0177.0.0.1')).toBe('loopback')
    expect(classifyAddress('0xa9fea9fe')).toBe('link-local')
    expect(classifyAddress('012.1')).toBe('private')
  })
})

describe('classifyAddress: IPv6', () => {
  it('classifies every mapped form ::ffff:a.b.c.d exactly like a.b.c.d', () => {
    fc.assert(
      fc.property(fc.ipV4(), (v4) => {
        expect(classifyAddress(`::ffff:${v4}`)).toBe(classifyAddress(v4))
      }),
      { numRuns: 2_000 },
    )
  })

  it('refuses every IPv4-compatible, NAT64, 6to4 and Teredo address, whatever it embeds', () => {
    const embedded = [
      inV6([0, 0, 0, 0, 0, 0, 0, 0], 96),
      inV6([0x64, 0xff9b, 0, 0, 0, 0, 0, 0], 96),
      inV6([0x64, 0xff9b, 1, 0, 0, 0, 0, 0], 48),
      inV6([0x2002, 0, 0, 0, 0, 0, 0, 0], 16),
      inV6([0x2001, 0, 0, 0, 0, 0, 0, 0], 32),
    ]
    fc.assert(
      fc.property(fc.oneof(...embedded), (address) => {
        expect(classifyAddress(address)).not.toBe('public')
      }),
      { numRuns: 2_000 },
    )
  })

  it('names the embedded class when a transition form carries a private IPv4 address', () => {
    expect(classifyAddress('64:ff9b::10.0.0.1')).toBe('private')
    expect(classifyAddress('64:ff9b::8.8.8.8')).toBe('translated')
    expect(classifyAddress('2002:7f00:1::')).toBe('loopback')
    expect(classifyAddress('2002:808:808::')).toBe('translated')
    expect(classifyAddress('::127.0.0.1')).toBe('loopback')
    expect(classifyAddress('::8.8.8.8')).toBe('translated')
    // Teredo stores the client address inverted: ~127.0.0.1 = 80ff:fffe.
    expect(classifyAddress('2001:0:4136:e378:8000:63bf:80ff:fffe')).toBe('loopback')
  })

  it.each([
    [[0xfc00], 7, 'address-private'],
    [[0xfe80], 10, 'address-link-local'],
    [[0xff00], 8, 'address-reserved'],
    [[0x2001, 0xdb8], 32, 'address-reserved'],
  ] as const)('every address in %j/%i is refused as %s', (base, prefix, reason) => {
    fc.assert(
      fc.property(inV6(base, prefix), (address) => {
        expect(reasonForAddressClass(classifyAddress(address)!)).toBe(reason)
      }),
      { numRuns: 500 },
    )
  })

  it('refuses everything outside global unicast (2000::/3) except mapped public IPv4', () => {
    fc.assert(
      fc.property(fc.bigInt({ min: 0n, max: (1n << 128n) - 1n }), (value) => {
        const inGlobal = value >> 125n === 1n
        const isMapped = value >> 32n === 0xffffn
        if (!inGlobal && !isMapped) expect(classifyIpv6Value(value)).not.toBe('public')
      }),
      { numRuns: 5_000 },
    )
  })

  it('refuses loopback, unspecified and the well-known examples', () => {
    expect(classifyAddress('::1')).toBe('loopback')
    expect(classifyAddress('::')).toBe('unspecified')
    expect(classifyAddress('[::1]')).toBe('loopback')
    expect(classifyAddress('fd00:ec2::254')).toBe('private')
    expect(classifyAddress('fe80::1%eth0')).toBe('link-local')
    expect(classifyAddress('fec0::1')).toBe('private')
    expect(classifyAddress('ff02::1')).toBe('multicast')
    expect(classifyAddress('2606:4700:4700::1111')).toBe('public')
    expect(classifyAddress('2a00:1450:4001:800::200e')).toBe('public')
  })
})

describe('classification invariants', () => {
  it('is total over IPv4: every value gets exactly one class and public has no reason', () => {
    fc.assert(
      fc.property(fc.integer({ min: 0, max: 0xffffffff }), (value) => {
        const klass = classifyIpv4Value(value)
        expect(reasonForAddressClass(klass) === undefined).toBe(klass === 'public')
      }),
      { numRuns: 5_000 },
    )
  })

  it('lets allowInwardFor open only classes a service can live on', () => {
    expect(isInwardExemptable('loopback')).toBe(true)
    expect(isInwardExemptable('private')).toBe(true)
    expect(isInwardExemptable('link-local')).toBe(true)
    for (const klass of [
      'unspecified',
      'multicast',
      'broadcast',
      'reserved',
      'translated',
    ] as const) {
      expect(isInwardExemptable(klass)).toBe(false)
    }
  })

  it('returns undefined for something that is not an address', () => {
    expect(classifyAddress('example.com')).toBeUndefined()
  })
})
