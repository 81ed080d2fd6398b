/**
 * Hostname allowlists, the one implementation every package uses.
 *
 * An entry is either an exact host (`api.example.com`) or a leading-dot domain
 * (`.example.com`) that matches the domain itself and every subdomain. Matching
 * is case-insensitive, ignores one trailing dot, compares internationalized
 * names in their ASCII (punycode) form, and never does substring or wildcard
 * matching: `*` is not a pattern character, and an empty list allows nothing.
 */

import { boundedMemo } from './bounded-memo.js'

export interface AllowlistEntry {
  readonly kind: 'exact' | 'domain'
  /** Lowercase ASCII host without a trailing dot. */
  readonly host: string
}

const LABEL = /^(?!-)[a-z0-9_-]{1,63}(?<!-)$/

/**
 * Canonical form of a hostname: lowercase ASCII (IDNA via the WHATWG URL
 * parser), no trailing dot. Returns `undefined` for anything that is not a
 * plain DNS name (ports, paths, user info, wildcards, empty labels).
 */
export function normalizeHostname(input: string): string | undefined {
  if (typeof input !== 'string') return undefined
  let host = input.trim()
  if (host.endsWith('.')) host = host.slice(0, -1)
  if (host === '' || host.length > 253) return undefined
  if (/[\s/\\?#@:*%[\]]/.test(host)) return undefined
  let ascii: string
  try {
    ascii = new URL(`http://${host}/`).hostname
  } catch {
    return undefined
  }
  if (ascii.endsWith('.')) {
    // One trailing dot was already removed from the input; a second is malformed.
    if (host.length !== input.trim().length) return undefined
    ascii = ascii.slice(0, -1)
  }
  const labels = ascii.split('.')
  if (labels.some((label) => !LABEL.test(label))) return undefined
  return ascii
}

/** Parses one allowlist entry, or returns `undefined` if it is not a valid entry. */
export function parseAllowlistEntry(entry: string): AllowlistEntry | undefined {
  if (typeof entry !== 'string') return undefined
  const trimmed = entry.trim()
  const isDomain = trimmed.startsWith('.')
  const host = normalizeHostname(isDomain ? trimmed.slice(1) : trimmed)
  if (host === undefined) return undefined
  return { kind: isDomain ? 'domain' : 'exact', host }
}

/** An allowlist parsed once, to check many hosts against. */
export interface CompiledAllowlist {
  /** The same answer as `isHostAllowed(host, allowedHosts)`. */
  allows(host: string): boolean
}

/**
 * Parses `allowedHosts` once. A proxy checks every request against the same
 * list; parsing each entry per check (a URL parse apiece) made the check's
 * cost grow with the list. Here a check is one normalization of the host, a
 * set lookup for exact entries and one per label for domain entries.
 */
export function compileAllowlist(allowedHosts: readonly string[]): CompiledAllowlist {
  const exact = new Set<string>()
  const domains = new Set<string>()
  for (const raw of allowedHosts) {
    const entry = parseAllowlistEntry(raw)
    if (entry === undefined) continue
    if (entry.kind === 'exact') exact.add(entry.host)
    else domains.add(entry.host)
  }
  const allows = (host: string): boolean => {
    const subject = normalizeHostname(host)
    if (subject === undefined) return false
    if (exact.has(subject)) return true
    // A domain entry matches the name itself and every name under it: try
    // the subject and each of its parents, label by label.
    let candidate = subject
    while (domains.size > 0) {
      if (domains.has(candidate)) return true
      const dot = candidate.indexOf('.')
      if (dot === -1) return false
      candidate = candidate.slice(dot + 1)
    }
    return false
  }
  // The list never changes once compiled, so a verdict depends on the host
  // alone. The egress proxy asks twice a CONNECT (its policy and
  // `allowInwardFor`), nearly always for the same few names; the
  // normalization (a WHATWG URL parse) was about 10 µs of its CPU per tunnel
  // (a CPU profile of 5,000 tunnels, bench scenario 5's load).
  const remembered = boundedMemo(allows, { maxEntries: 256, maxInputLength: 253 })
  return { allows: (host) => (typeof host === 'string' ? remembered(host) : false) }
}

/**
 * True when `host` is allowed by `allowedHosts`. Invalid entries never match.
 * The host is normalized the same way as entries; IP literals only match an
 * identical exact entry. To check many hosts against one list, compile it
 * once with `compileAllowlist`.
 */
export function isHostAllowed(host: string, allowedHosts: readonly string[]): boolean {
  return compileAllowlist(allowedHosts).allows(host)
}
