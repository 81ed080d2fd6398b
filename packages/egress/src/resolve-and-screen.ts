/**
 * Resolve once, screen every answer, hand back the addresses to dial.
 *
 * The addresses returned are the only ones the proxy ever connects to for this
 * request: nothing downstream looks the name up again, so an answer that
 * changes between a check and a connect (DNS rebinding) never gets the chance.
 * One bad answer refuses the whole request: a name that resolves to a public
 * and a private address is treated as an attempt to reach the private one.
 */
import { lookup as systemLookup } from 'node:dns/promises'
import type { EgressReasonCode } from '@cordon/core'
import { classifyIp, isInwardExemptable, reasonForAddressClass } from './address-screen.js'
import type { TargetHost } from './authority.js'
import { type IpLiteral, parseIpLiteral, unwrapMappedIpv4 } from './ip-literal.js'
import type { ProxySelf } from './proxy-self.js'

export interface LookupAnswer {
  readonly address: string
  readonly family: 4 | 6
}

/** Resolves a host name to every address it has. Must reject when it cannot. */
export type EgressLookup = (hostname: string) => Promise<readonly LookupAnswer[]>

/** The system resolver (getaddrinfo), every answer, in the order it gives them. */
export const systemResolver: EgressLookup = async (hostname) => {
  const answers = await systemLookup(hostname, { all: true, verbatim: true })
  return answers.map((answer) => ({ address: answer.address, family: answer.family === 6 ? 6 : 4 }))
}

export interface ScreenContext {
  readonly port: number
  /** The name is in `allowInwardFor`: its private and loopback answers may be dialled. */
  readonly inwardExempt: boolean
  readonly self: ProxySelf
}

export type ScreenResult =
  | { readonly ok: true; readonly addresses: readonly IpLiteral[] }
  | { readonly ok: false; readonly reason: EgressReasonCode; readonly address?: string }

/** The reason `ip:port` is refused, or `undefined` if it may be dialled. */
export function screenAddress(ip: IpLiteral, context: ScreenContext): EgressReasonCode | undefined {
  if (context.self.isSelfEndpoint(ip, context.port)) return 'address-proxy-self'
  const klass = classifyIp(ip)
  const reason = reasonForAddressClass(klass)
  if (reason !== undefined) {
    return context.inwardExempt && isInwardExemptable(klass) ? undefined : reason
  }
  if (context.self.isLocalAddress(ip)) return 'address-proxy-self'
  return undefined
}

export interface ResolveContext extends ScreenContext {
  readonly lookup: EgressLookup
  readonly dnsTimeoutMs: number
}

/** Resolves (names only) and screens; literals are screened as they are. */
export async function resolveAndScreen(
  target: TargetHost,
  context: ResolveContext,
): Promise<ScreenResult> {
  let candidates: IpLiteral[]
  if (target.kind === 'ip') {
    candidates = [target.ip]
  } else {
    const answered = await lookupWithTimeout(target.name, context)
    if (!answered.ok) return answered
    candidates = answered.addresses
  }
  const seen = new Set<string>()
  const addresses: IpLiteral[] = []
  for (const ip of candidates) {
    const reason = screenAddress(ip, context)
    if (reason !== undefined) return { ok: false, reason, address: ip.address }
    if (seen.has(ip.address)) continue
    seen.add(ip.address)
    addresses.push(ip)
  }
  return { ok: true, addresses }
}

async function lookupWithTimeout(
  name: string,
  context: ResolveContext,
): Promise<
  | { readonly ok: true; readonly addresses: IpLiteral[] }
  | { readonly ok: false; readonly reason: EgressReasonCode }
> {
  const answers = await answerWithin(name, context)
  if (answers === 'failed') return { ok: false, reason: 'dns-failed' }
  if (answers === 'timeout') return { ok: false, reason: 'dns-timeout' }
  if (!Array.isArray(answers) || answers.length === 0) return { ok: false, reason: 'dns-failed' }
  const addresses: IpLiteral[] = []
  for (const answer of answers as readonly unknown[]) {
    const text = (answer as { address?: unknown } | null)?.address
    // A resolver answer is screened in the same canonical form as a literal,
    // so `::ffff:127.0.0.1` or an odd spelling from a custom lookup is caught.
    const ip = typeof text === 'string' ? parseIpLiteral(text) : undefined
    if (ip === undefined) return { ok: false, reason: 'dns-failed' }
    addresses.push(unwrapMappedIpv4(ip))
  }
  return { ok: true, addresses }
}

/**
 * The lookup's answer, `'timeout'` once `dnsTimeoutMs` has passed, or
 * `'failed'`. One promise and one timer, settled by whichever comes first.
 * This runs on every named CONNECT before the upstream is dialled, so it
 * avoids what a `Promise.race` against a timeout promise costs on top: a
 * second promise, a deferred call of the lookup and their extra microtask
 * turns.
 */
function answerWithin(
  name: string,
  context: ResolveContext,
): Promise<readonly LookupAnswer[] | 'timeout' | 'failed'> {
  return new Promise((resolve) => {
    const timer = setTimeout(() => resolve('timeout'), context.dnsTimeoutMs)
    const settle = (answer: readonly LookupAnswer[] | 'failed'): void => {
      clearTimeout(timer)
      resolve(answer)
    }
    let pending: Promise<readonly LookupAnswer[]>
    try {
      // A lookup that throws instead of rejecting is a failed lookup too.
      pending = Promise.resolve(context.lookup(name))
    } catch {
      settle('failed')
      return
    }
    pending.then(settle, () => settle('failed'))
  })
}
