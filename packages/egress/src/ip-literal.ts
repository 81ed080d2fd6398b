/**
 * IP literals in every spelling a resolver or URL parser accepts.
 *
 * `getaddrinfo` and the WHATWG URL parser both read `0x7f.1`, `2130706433`,
 * `0177.0.0.1` and `127.1` as 127.0.0.1. If the proxy read those strings as host
 * names it would check one thing and the operating system would dial another,
 * so every spelling is parsed here into one canonical form, and that form is
 * what gets screened and dialled. The IPv4 rules follow the WHATWG URL host
 * parser (the tests hold this parser to it), which accepts the same inputs as
 * `inet_aton`.
 */

import { boundedMemo } from '@cordon/core/backend'

export interface IpLiteral {
  /**
   * Canonical text: dotted decimal for IPv4; for IPv6 the RFC 5952 form
   * (lowercase, no leading zeros, the longest run of zero groups as `::`),
   * written in hex groups throughout, as the URL standard serialises it.
   */
  readonly address: string
  readonly family: 4 | 6
  /** IPv6 zone id (`%eth0`), when the literal carried one; never part of `address`. */
  readonly zone?: string
}

/**
 * True when a host string is meant as an IP literal, valid or not: bracketed,
 * containing a colon, or a dotted string whose last label is a number (the
 * URL standard's "ends in a number"). A string for which this is true must
 * never be sent to DNS: if it does not parse, it is refused.
 */
export function looksLikeIpLiteral(host: string): boolean {
  if (host.startsWith('[') || host.includes(':')) return true
  const labels = host.split('.')
  if (labels.length > 1 && labels.at(-1) === '') labels.pop()
  const last = labels.at(-1) ?? ''
  if (last !== '' && /^[0-9]+$/.test(last)) return true
  return /^0x[0-9a-f]*$/i.test(last)
}

/**
 * Parses an IPv4 or IPv6 literal in any accepted spelling; `undefined` if it
 * is not one. Remembered by input: every CONNECT parses the client's source
 * address and each resolved address, nearly always the same few strings; on
 * the bench machine parsing the client's address alone took about 20 µs of
 * CPU per tunnel (perf, bench scenario 5), before the upstream is dialled.
 */
export function parseIpLiteral(input: string): IpLiteral | undefined {
  if (typeof input !== 'string' || input.length === 0 || input.length > 512) return undefined
  return parseIpLiteralRemembered(input)
}

const parseIpLiteralRemembered = boundedMemo(parseIpLiteralText, {
  maxEntries: 1024,
  maxInputLength: 512,
})

function parseIpLiteralText(input: string): IpLiteral | undefined {
  if (input.startsWith('[')) {
    if (!input.endsWith(']')) return undefined
    return parseIpv6WithZone(input.slice(1, -1))
  }
  if (input.includes(':')) return parseIpv6WithZone(input)
  const value = parseIpv4Number(input)
  return value === undefined ? undefined : { address: formatIpv4(value), family: 4 }
}

/** The 32-bit value of an IPv4 literal in any accepted spelling. */
export function parseIpv4Number(input: string): number | undefined {
  const parts = input.split('.')
  if (parts.length > 1 && parts.at(-1) === '') parts.pop()
  if (parts.length === 0 || parts.length > 4) return undefined
  const numbers: number[] = []
  for (const part of parts) {
    const n = parseIpv4Part(part)
    if (n === undefined) return undefined
    numbers.push(n)
  }
  const last = numbers.pop()!
  if (numbers.some((n) => n > 255)) return undefined
  // The last part fills every byte the earlier parts did not name: `127.1` is 127.0.0.1.
  if (last >= 256 ** (4 - numbers.length)) return undefined
  let value = last
  numbers.forEach((n, index) => {
    value += n * 256 ** (3 - index)
  })
  return value
}

function parseIpv4Part(part: string): number | undefined {
  if (part === '') return undefined
  let digits = part
  let radix = 10
  if (/^0x/i.test(part)) {
    digits = part.slice(2)
    radix = 16
    // The URL standard reads a bare `0x` as zero.
    if (digits === '') return 0
    if (!/^[0-9a-f]+$/i.test(digits)) return undefined
  } else if (part.length > 1 && part.startsWith('0')) {
    digits = part.slice(1)
    radix = 8
    if (!/^[0-7]+$/.test(digits)) return undefined
  } else if (!/^[0-9]+$/.test(digits)) {
    return undefined
  }
  // Strip leading zeros first so a long run of them cannot hide a small number
  // behind the length guard, then refuse anything wider than 32 bits.
  const significant = digits.replace(/^0+(?=.)/, '')
  if (significant.length > 11) return undefined
  const value = Number.parseInt(significant, radix)
  return value > 0xffffffff ? undefined : value
}

export function formatIpv4(value: number): string {
  return [value >>> 24, (value >>> 16) & 255, (value >>> 8) & 255, value & 255].join('.')
}

function parseIpv6WithZone(input: string): IpLiteral | undefined {
  let text = input
  let zone: string | undefined
  const percent = text.indexOf('%')
  if (percent !== -1) {
    zone = text.slice(percent + 1)
    text = text.slice(0, percent)
    // In a URL the zone separator itself is percent-encoded: `[fe80::1%25eth0]`.
    if (zone.startsWith('25') && zone.length > 2) zone = zone.slice(2)
    if (!/^[A-Za-z0-9_.~-]{1,64}$/.test(zone)) return undefined
  }
  const groups = parseIpv6Groups(text)
  if (groups === undefined) return undefined
  const literal: IpLiteral = { address: formatIpv6(groups), family: 6 }
  return zone === undefined ? literal : { ...literal, zone }
}

/** The eight 16-bit groups of an IPv6 address without zone or brackets. */
export function parseIpv6Groups(text: string): number[] | undefined {
  if (text.length === 0 || text.length > 45) return undefined
  const doubleColon = text.indexOf('::')
  if (doubleColon !== -1 && text.indexOf('::', doubleColon + 1) !== -1) return undefined
  const head = doubleColon === -1 ? text : text.slice(0, doubleColon)
  const tail = doubleColon === -1 ? '' : text.slice(doubleColon + 2)
  const headGroups = parseGroupList(head, doubleColon === -1)
  const tailGroups = parseGroupList(tail, true)
  if (headGroups === undefined || tailGroups === undefined) return undefined
  const present = headGroups.length + tailGroups.length
  if (doubleColon === -1) return present === 8 ? headGroups : undefined
  // `::` stands for at least one zero group.
  if (present > 7) return undefined
  return [...headGroups, ...new Array<number>(8 - present).fill(0), ...tailGroups]
}

function parseGroupList(text: string, mayEndInIpv4: boolean): number[] | undefined {
  if (text === '') return []
  const pieces = text.split(':')
  const groups: number[] = []
  for (const [index, piece] of pieces.entries()) {
    const isLast = index === pieces.length - 1
    if (isLast && mayEndInIpv4 && piece.includes('.')) {
      const value = parseStrictDottedQuad(piece)
      if (value === undefined) return undefined
      groups.push(value >>> 16, value & 0xffff)
      continue
    }
    if (!/^[0-9a-f]{1,4}$/i.test(piece)) return undefined
    groups.push(Number.parseInt(piece, 16))
  }
  return groups
}

/** The IPv4 tail of an IPv6 literal is strict dotted decimal in every standard. */
function parseStrictDottedQuad(text: string): number | undefined {
  const parts = text.split('.')
  if (parts.length !== 4) return undefined
  let value = 0
  for (const part of parts) {
    if (!/^(0|[1-9][0-9]{0,2})$/.test(part)) return undefined
    const n = Number(part)
    if (n > 255) return undefined
    value = value * 256 + n
  }
  return value
}

export function formatIpv6(groups: readonly number[]): string {
  let bestStart = -1
  let bestLength = 1
  for (let start = 0; start < 8; ) {
    if (groups[start] !== 0) {
      start += 1
      continue
    }
    let end = start
    while (end < 8 && groups[end] === 0) end += 1
    if (end - start > bestLength) {
      bestStart = start
      bestLength = end - start
    }
    start = end
  }
  const hex = groups.map((group) => group.toString(16))
  if (bestStart === -1) return hex.join(':')
  return `${hex.slice(0, bestStart).join(':')}::${hex.slice(bestStart + bestLength).join(':')}`
}

/**
 * The IPv4 address an IPv4-mapped IPv6 address (`::ffff:a.b.c.d`) stands for.
 * A dual-stack socket dialling the mapped form reaches the IPv4 host, so the
 * proxy screens and dials the IPv4 form.
 */
export function unwrapMappedIpv4(literal: IpLiteral): IpLiteral {
  if (literal.family !== 6) return literal
  const groups = parseIpv6Groups(literal.address)
  if (groups === undefined) return literal
  const isMapped = groups.slice(0, 5).every((group) => group === 0) && groups[5] === 0xffff
  if (!isMapped) return literal
  return { address: formatIpv4(((groups[6]! << 16) | groups[7]!) >>> 0), family: 4 }
}
