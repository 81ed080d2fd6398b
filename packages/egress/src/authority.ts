/**
 * Request authorities (`host:port`, `[v6]:port`) and the host they name.
 *
 * The proxy checks, resolves and dials what these functions return, and
 * nothing else: the one parse is the one truth, so there is no second parser
 * (the URL class, the resolver, the upstream client) whose different reading
 * of an odd string could be dialled instead.
 */
import { boundedMemo, normalizeHostname } from '@cordon/core/backend'
import {
  type IpLiteral,
  looksLikeIpLiteral,
  parseIpLiteral,
  unwrapMappedIpv4,
} from './ip-literal.js'

export interface Authority {
  /** The host as written, without brackets; not yet normalised. */
  readonly host: string
  /** `undefined` when the authority named no port and no default was given. */
  readonly port: number | undefined
}

/**
 * The reference's `splitAuthority`: `host[:port]` or `[ipv6][:port]` as
 * `{ host, port? }`, never `undefined`. An authority that is not plain (user
 * info, whitespace, a bad port, an unbracketed IPv6 address) gives an empty
 * host, which no allowlist matches, rather than a best guess that one might.
 * The proxy itself uses the stricter {@link parseAuthority}.
 */
export function splitAuthority(authority: string): { host: string; port?: number } {
  const parsed = parseAuthority(authority)
  if (parsed === undefined) return { host: '' }
  return parsed.port === undefined
    ? { host: parsed.host }
    : { host: parsed.host, port: parsed.port }
}

/**
 * Parses `host[:port]` or `[ipv6][:port]`. Returns `undefined` for anything
 * that is not a plain authority: user info (`user@host`), an empty host, an
 * unbracketed IPv6 address, an empty or non-decimal port, a port outside
 * 1..65535, whitespace or control characters.
 */
export function parseAuthority(authority: string): Authority | undefined
export function parseAuthority(
  authority: string,
  defaultPort: number,
): (Authority & { readonly port: number }) | undefined
export function parseAuthority(authority: string, defaultPort?: number): Authority | undefined {
  if (typeof authority !== 'string' || authority.length === 0 || authority.length > 1024) {
    return undefined
  }
  if (/[\s@/\\?#]/.test(authority) || hasControlCharacter(authority)) return undefined
  let host: string
  let portText: string | undefined
  if (authority.startsWith('[')) {
    const close = authority.indexOf(']')
    if (close === -1) return undefined
    host = authority.slice(1, close)
    const rest = authority.slice(close + 1)
    if (rest !== '') {
      if (!rest.startsWith(':')) return undefined
      portText = rest.slice(1)
    }
    if (!host.includes(':')) return undefined
  } else {
    const colon = authority.indexOf(':')
    if (colon !== -1 && authority.indexOf(':', colon + 1) !== -1) return undefined
    host = colon === -1 ? authority : authority.slice(0, colon)
    portText = colon === -1 ? undefined : authority.slice(colon + 1)
  }
  if (host === '') return undefined
  let port = defaultPort
  if (portText !== undefined) {
    if (!/^[0-9]{1,5}$/.test(portText)) return undefined
    port = Number(portText)
  }
  if (port !== undefined && (!Number.isInteger(port) || port < 1 || port > 65535)) return undefined
  return { host, port }
}

function hasControlCharacter(text: string): boolean {
  for (let index = 0; index < text.length; index += 1) {
    const code = text.charCodeAt(index)
    if (code < 0x20 || code === 0x7f) return true
  }
  return false
}

/** The host a request names, in the one form the proxy checks, resolves and dials. */
export type TargetHost =
  | { readonly kind: 'name'; readonly name: string }
  | { readonly kind: 'ip'; readonly ip: IpLiteral }

/**
 * Normalises a host from an authority. Anything that looks like an IP literal
 * must parse as one (a malformed literal is refused, never handed to DNS,
 * whose own parser might read it as an address); names go through core's
 * `normalizeHostname` (IDNA to punycode, lowercase, no trailing dot) and are
 * checked again afterwards, because IDNA mapping can turn full-width digits
 * or ideographic dots into an IPv4 literal.
 */
export function normalizeTargetHost(host: string): TargetHost | undefined {
  return normalizeTargetHostRemembered(host)
}

/**
 * Remembered by input: a CONNECT names nearly always one of a few hosts, and
 * the IDNA step (a WHATWG URL parse) with the literal checks around it was
 * about 15 µs of the proxy's CPU per tunnel before the upstream is dialled
 * (a CPU profile of 5,000 tunnels, bench scenario 5's load).
 */
const normalizeTargetHostRemembered = boundedMemo(normalizeTargetHostText, {
  maxEntries: 1024,
  maxInputLength: 512,
})

function normalizeTargetHostText(host: string): TargetHost | undefined {
  if (looksLikeIpLiteral(host)) return ipTarget(host)
  const name = normalizeHostname(host)
  if (name === undefined) return undefined
  if (looksLikeIpLiteral(name)) return ipTarget(name)
  return { kind: 'name', name }
}

function ipTarget(text: string): TargetHost | undefined {
  const ip = parseIpLiteral(text)
  return ip === undefined ? undefined : { kind: 'ip', ip: unwrapMappedIpv4(ip) }
}

/** The text a policy matches against: the ASCII name, or the canonical address. */
export function policySubject(target: TargetHost): string {
  return target.kind === 'name' ? target.name : target.ip.address
}

/** Same host after normalisation (ports are compared by the caller). */
export function sameTarget(a: TargetHost, b: TargetHost): boolean {
  return policySubject(a) === policySubject(b)
}

/**
 * Checks every `Host` header against the target the request line named.
 * Servers behind the proxy route on `Host`, so one that disagrees with what
 * was checked would let a request for an allowed host land on another; two
 * `Host` headers are refused for the same reason.
 */
export function checkHostHeaders(
  rawHeaders: readonly string[],
  target: TargetHost,
  port: number,
  defaultPort: number,
): 'ok' | 'host-mismatch' | 'bad-request' {
  const values: string[] = []
  for (let index = 0; index + 1 < rawHeaders.length; index += 2) {
    if (rawHeaders[index]!.toLowerCase() === 'host') values.push(rawHeaders[index + 1]!)
  }
  if (values.length === 0) return 'ok'
  if (values.length > 1) return 'host-mismatch'
  const authority = parseAuthority(values[0]!.trim(), defaultPort)
  if (authority === undefined) return 'bad-request'
  const named = normalizeTargetHost(authority.host)
  if (named === undefined) return 'bad-request'
  return sameTarget(named, target) && authority.port === port ? 'ok' : 'host-mismatch'
}
