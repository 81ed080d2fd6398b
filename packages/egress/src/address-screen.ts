/**
 * Which addresses a sandbox may be connected to.
 *
 * Pure classification over fixed CIDR tables, longest prefix wins. IPv4 is
 * public unless a table entry says otherwise. IPv6 is the other way round: only
 * global unicast (`2000::/3`) can be public, so space the registries have not
 * allocated yet is refused until this table learns about it, instead of being
 * let through by omission. Addresses that carry an IPv4 address inside them
 * (mapped, compatible, NAT64, 6to4) report the embedded address's class when
 * that is not public, so `::ffff:10.0.0.1` is refused as private, not as an
 * oddity.
 */
import type { EgressReasonCode } from '@cordon/core'
import { type IpLiteral, parseIpLiteral, parseIpv6Groups } from './ip-literal.js'

export type AddressClass =
  | 'public'
  /** `0.0.0.0/8`, `::`: Linux dials the local host for these. */
  | 'unspecified'
  | 'loopback'
  /** RFC 1918 and IPv6 unique-local (plus deprecated site-local). */
  | 'private'
  /** Carrier-grade NAT space, `100.64.0.0/10`: private to the provider's network. */
  | 'shared'
  /** `169.254.0.0/16` (cloud metadata lives here) and `fe80::/10`. */
  | 'link-local'
  | 'benchmarking'
  | 'documentation'
  | 'multicast'
  | 'broadcast'
  /** Special-purpose or unallocated space that is never a destination on the public internet. */
  | 'reserved'
  /** IPv6 transition forms (NAT64, 6to4, Teredo, IPv4-compatible) that tunnel to an IPv4 host. */
  | 'translated'

type Ipv4Entry = readonly [base: string, prefix: number, klass: AddressClass]

const IPV4_TABLE: readonly Ipv4Entry[] = [
  ['0.0.0.0', 8, 'unspecified'],
  ['10.0.0.0', 8, 'private'],
  ['100.64.0.0', 10, 'shared'],
  ['127.0.0.0', 8, 'loopback'],
  ['169.254.0.0', 16, 'link-local'],
  ['172.16.0.0', 12, 'private'],
  ['192.0.0.0', 24, 'reserved'],
  ['192.0.2.0', 24, 'documentation'],
  ['192.88.99.0', 24, 'reserved'],
  ['192.168.0.0', 16, 'private'],
  ['198.18.0.0', 15, 'benchmarking'],
  ['198.51.100.0', 24, 'documentation'],
  ['203.0.113.0', 24, 'documentation'],
  ['224.0.0.0', 4, 'multicast'],
  ['240.0.0.0', 4, 'reserved'],
  ['255.255.255.255', 32, 'broadcast'],
]

/** Where an IPv6 prefix hides an IPv4 address, as the bit offset of its 32 bits. */
type Embedded = { readonly offset: number; readonly inverted?: boolean }

type Ipv6Entry = readonly [base: string, prefix: number, klass: AddressClass, embedded?: Embedded]

const IPV6_TABLE: readonly Ipv6Entry[] = [
  ['::', 0, 'reserved'],
  ['::', 128, 'unspecified'],
  ['::1', 128, 'loopback'],
  // Deprecated IPv4-compatible form: nothing legitimate uses it any more.
  ['::', 96, 'translated', { offset: 96 }],
  // IPv4-mapped: classifies exactly like the IPv4 address (see classifyIp).
  ['::ffff:0:0', 96, 'public', { offset: 96 }],
  ['64:ff9b::', 96, 'translated', { offset: 96 }],
  // Local-use NAT64: the embedding depends on the operator's prefix length.
  ['64:ff9b:1::', 48, 'translated'],
  ['100::', 64, 'reserved'],
  ['2000::', 3, 'public'],
  ['2001::', 23, 'reserved'],
  // Teredo: the client's IPv4 address sits in the last 32 bits, inverted.
  ['2001::', 32, 'translated', { offset: 96, inverted: true }],
  ['2001:db8::', 32, 'documentation'],
  ['2002::', 16, 'translated', { offset: 16 }],
  ['3fff::', 20, 'documentation'],
  ['fc00::', 7, 'private'],
  ['fe80::', 10, 'link-local'],
  ['fec0::', 10, 'private'],
  ['ff00::', 8, 'multicast'],
]

interface CompiledIpv4 {
  readonly base: number
  readonly mask: number
  readonly prefix: number
  readonly klass: AddressClass
}

interface CompiledIpv6 {
  readonly base: bigint
  readonly mask: bigint
  readonly prefix: number
  readonly klass: AddressClass
  readonly embedded: Embedded | undefined
}

const ALL_128 = (1n << 128n) - 1n

function ipv4Mask(prefix: number): number {
  return prefix === 0 ? 0 : (0xffffffff << (32 - prefix)) >>> 0
}

function ipv6Mask(prefix: number): bigint {
  return prefix === 0 ? 0n : (ALL_128 << BigInt(128 - prefix)) & ALL_128
}

function ipv4Value(address: string): number {
  return address.split('.').reduce((value, part) => value * 256 + Number(part), 0)
}

function ipv6Value(address: string): bigint {
  const groups = parseIpv6Groups(address)
  if (groups === undefined) throw new Error(`not an IPv6 address: ${address}`)
  return groups.reduce((value, group) => (value << 16n) | BigInt(group), 0n)
}

// Sorted longest prefix first, so the first match is the most specific one.
const COMPILED_IPV4: readonly CompiledIpv4[] = IPV4_TABLE.map(([base, prefix, klass]) => ({
  base: ipv4Value(base),
  mask: ipv4Mask(prefix),
  prefix,
  klass,
})).sort((a, b) => b.prefix - a.prefix)

const COMPILED_IPV6: readonly CompiledIpv6[] = IPV6_TABLE.map(
  ([base, prefix, klass, embedded]) => ({
    base: ipv6Value(base),
    mask: ipv6Mask(prefix),
    prefix,
    klass,
    embedded,
  }),
).sort((a, b) => b.prefix - a.prefix)

export function classifyIpv4Value(value: number): AddressClass {
  for (const entry of COMPILED_IPV4) {
    if ((value & entry.mask) >>> 0 === entry.base) return entry.klass
  }
  return 'public'
}

export function classifyIpv6Value(value: bigint): AddressClass {
  for (const entry of COMPILED_IPV6) {
    if ((value & entry.mask) !== entry.base) continue
    if (entry.embedded === undefined) return entry.klass
    let embedded = Number((value >> BigInt(128 - entry.embedded.offset - 32)) & 0xffffffffn)
    if (entry.embedded.inverted) embedded = ~embedded >>> 0
    const inner = classifyIpv4Value(embedded)
    // A mapped address is the IPv4 address; the tunnelled forms are refused
    // either way, but say why in the embedded address's terms when it is not public.
    if (entry.klass === 'public') return inner
    return inner === 'public' ? entry.klass : inner
  }
  return 'reserved'
}

/** Classifies a parsed literal; the zone id plays no part. */
export function classifyIp(ip: IpLiteral): AddressClass {
  if (ip.family === 4) return classifyIpv4Value(ipv4Value(ip.address))
  return classifyIpv6Value(ipv6Value(ip.address))
}

/** Classifies an IP literal in any spelling; `undefined` if `address` is not one. */
export function classifyAddress(address: string): AddressClass | undefined {
  const ip = parseIpLiteral(address)
  return ip === undefined ? undefined : classifyIp(ip)
}

/** The reason code an address of this class is refused with; `undefined` for public. */
export function reasonForAddressClass(klass: AddressClass): EgressReasonCode | undefined {
  switch (klass) {
    case 'public':
      return undefined
    case 'loopback':
      return 'address-loopback'
    case 'private':
    case 'shared':
      return 'address-private'
    case 'link-local':
      return 'address-link-local'
    default:
      return 'address-reserved'
  }
}

/**
 * Classes that `allowInwardFor` may open for a named destination: the ones a
 * real service can live on. Unspecified, multicast, broadcast, reserved and
 * transition forms are never a legitimate destination, named or not.
 */
export function isInwardExemptable(klass: AddressClass): boolean {
  return klass === 'loopback' || klass === 'private' || klass === 'shared' || klass === 'link-local'
}
