/**
 * The decision every request and tunnel goes through, in a fixed order that
 * does the cheap, local checks first and touches DNS last: client, host
 * syntax, policy, port, then resolution and address screening. The order also
 * means a refused name is never looked up, so DNS never learns what a sandbox
 * tried to reach and could not.
 */
import type { EgressReasonCode } from '@cordon/core'
import type { TargetHost } from './authority.js'
import { policySubject } from './authority.js'
import type { IpLiteral } from './ip-literal.js'
import type { ResolvedOptions } from './options.js'
import type { ClientContext } from './policy-state.js'
import type { ProxySelf } from './proxy-self.js'
import { type EgressLookup, resolveAndScreen } from './resolve-and-screen.js'

export type Admission =
  | { readonly ok: true; readonly addresses: readonly IpLiteral[] }
  | { readonly ok: false; readonly reason: EgressReasonCode; readonly address?: string }

export interface AdmissionContext {
  readonly options: ResolvedOptions
  readonly lookup: EgressLookup
  readonly self: ProxySelf
}

export async function admit(
  context: AdmissionContext,
  client: ClientContext,
  target: TargetHost,
  port: number,
): Promise<Admission> {
  const subject = policySubject(target)
  const verdict = await client.holder.evaluate(subject)
  if (verdict !== 'allowed') return { ok: false, reason: verdict }
  if (!context.options.allowedPorts.has(port)) return { ok: false, reason: 'port-not-allowed' }
  const inwardExempt = target.kind === 'name' && context.options.allowInwardFor.allows(target.name)
  const screened = await resolveAndScreen(target, {
    port,
    inwardExempt,
    self: context.self,
    lookup: context.lookup,
    dnsTimeoutMs: context.options.limits.dnsTimeoutMs,
  })
  if (!screened.ok) {
    return screened.address === undefined
      ? { ok: false, reason: screened.reason }
      : { ok: false, reason: screened.reason, address: screened.address }
  }
  return { ok: true, addresses: screened.addresses }
}

/** Counts upstream connections globally and per client against the limits. */
export class TunnelSlots {
  readonly #max: number
  readonly #maxPerClient: number
  #total = 0
  readonly #perClient = new Map<string, number>()

  constructor(max: number, maxPerClient: number) {
    this.#max = max
    this.#maxPerClient = maxPerClient
  }

  /** Takes a slot, or returns `undefined` at a limit. The release function is idempotent. */
  acquire(client: string): (() => void) | undefined {
    const held = this.#perClient.get(client) ?? 0
    if (this.#total >= this.#max || held >= this.#maxPerClient) return undefined
    this.#total += 1
    this.#perClient.set(client, held + 1)
    let released = false
    return () => {
      if (released) return
      released = true
      this.#total -= 1
      const now = (this.#perClient.get(client) ?? 1) - 1
      if (now <= 0) this.#perClient.delete(client)
      else this.#perClient.set(client, now)
    }
  }

  get active(): number {
    return this.#total
  }
}
