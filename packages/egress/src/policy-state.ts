/**
 * The policy in force: one global policy and, for a gateway that serves many
 * sandboxes, one registration per client source address. Each policy keeps
 * its own resolver cache, so replacing a policy also drops what its resolver
 * said.
 *
 * A resolver's answer is judged by core's one rule (`askResolver`): one
 * invalid entry, an error or an overrun of `resolverTimeoutMs` denies every
 * request with `resolver-failed`, and is not cached, so the next request asks
 * again.
 *
 * Changes apply to connections that start afterwards; a tunnel already open
 * keeps the decision it was opened with.
 */
import type { BrokeredCredential, EgressPolicy, EgressReasonCode } from '@cordon/core'
import { askResolver, type CompiledAllowlist, compileAllowlist } from '@cordon/core/backend'
import type { CredentialBroker } from './credential-broker.js'
import { parseIpLiteral, unwrapMappedIpv4 } from './ip-literal.js'

export interface PolicyStateOptions {
  /** Refuse clients that have no registration instead of applying the global policy. */
  readonly requireClientPolicy: boolean
  readonly resolverCacheTtlMs: number
  readonly resolverTimeoutMs: number
}

type ResolverPolicy = Extract<EgressPolicy, { kind: 'resolver' }>

type HostListResult =
  | { readonly ok: true; readonly hosts: CompiledAllowlist }
  | { readonly ok: false; readonly problem: string }

/**
 * A policy plus the short-lived cache of its resolver's answer. Host lists
 * (the static list, each resolver answer) are compiled once, when the policy
 * or the answer arrives, not on every request.
 */
export class PolicyHolder {
  readonly policy: EgressPolicy
  readonly #ttlMs: number
  readonly #timeoutMs: number
  readonly #staticHosts: CompiledAllowlist | undefined
  #cached: { readonly until: number; readonly hosts: CompiledAllowlist } | undefined
  #inFlight: Promise<HostListResult> | undefined

  constructor(policy: EgressPolicy, ttlMs: number, timeoutMs: number) {
    this.policy = policy
    this.#ttlMs = ttlMs
    this.#timeoutMs = timeoutMs
    this.#staticHosts = policy.kind === 'static' ? compileAllowlist(policy.allowedHosts) : undefined
  }

  /** `allowed`, or the reason the policy refuses `subject`. */
  async evaluate(subject: string): Promise<EgressReasonCode> {
    const policy = this.policy
    switch (policy.kind) {
      case 'deny-all':
        return 'policy-deny-all'
      case 'allow-all':
        return 'allowed'
      case 'static':
        return this.#staticHosts?.allows(subject) ? 'allowed' : 'host-not-allowed'
      case 'resolver': {
        const list = await this.#resolvedHosts(policy)
        if (!list.ok) return 'resolver-failed'
        return list.hosts.allows(subject) ? 'allowed' : 'host-not-allowed'
      }
      default:
        // An untyped caller's unknown kind confines rather than opens.
        return 'policy-deny-all'
    }
  }

  #resolvedHosts(policy: ResolverPolicy): Promise<HostListResult> {
    const cached = this.#cached
    if (cached !== undefined && cached.until > Date.now()) {
      return Promise.resolve({ ok: true, hosts: cached.hosts })
    }
    // Concurrent requests share one call, so a burst does not stampede the host's resolver.
    this.#inFlight ??= this.#callResolver(policy).finally(() => {
      this.#inFlight = undefined
    })
    return this.#inFlight
  }

  async #callResolver(policy: ResolverPolicy): Promise<HostListResult> {
    const answer = await askResolver(policy.resolve, this.#timeoutMs)
    // Refusals are not cached: the next request asks again.
    if (!answer.ok) return answer
    const hosts = compileAllowlist(answer.allowedHosts)
    this.#cached = { until: Date.now() + this.#ttlMs, hosts }
    return { ok: true, hosts }
  }
}

/** What a registered client gets: its label, policy and (optionally) its own credentials. */
export interface ClientPolicy {
  /** A label reported in decision events, e.g. the sandbox id. */
  readonly clientId: string
  readonly policy: EgressPolicy
  /**
   * Credentials for this client only. When given (even empty) they replace the
   * proxy-wide list for this client; when absent the proxy-wide list applies.
   */
  readonly brokeredCredentials?: readonly BrokeredCredential[]
}

export interface ClientContext {
  readonly holder: PolicyHolder
  readonly broker: CredentialBroker
  readonly clientId: string | undefined
}

export type ClientLookup =
  | { readonly ok: true; readonly client: ClientContext }
  | { readonly ok: false; readonly reason: EgressReasonCode }

/** Reason code for a client that has no registration while registrations are required. */
export const UNKNOWN_CLIENT_REASON: EgressReasonCode = 'client-unknown'

export class PolicyState {
  readonly #options: PolicyStateOptions
  #global: ClientContext
  readonly #clients = new Map<string, ClientContext>()

  constructor(policy: EgressPolicy, broker: CredentialBroker, options: PolicyStateOptions) {
    this.#options = options
    this.#global = { holder: this.#holder(policy), broker, clientId: undefined }
  }

  setGlobalPolicy(policy: EgressPolicy): void {
    this.#global = { ...this.#global, holder: this.#holder(policy) }
  }

  /** `address` must already be canonical (see `canonicalClientAddress`). */
  setClient(
    address: string,
    clientId: string,
    policy: EgressPolicy,
    broker: CredentialBroker | undefined,
  ): void {
    this.#clients.set(address, {
      holder: this.#holder(policy),
      broker: broker ?? this.#global.broker,
      clientId,
    })
  }

  removeClient(address: string): boolean {
    return this.#clients.delete(address)
  }

  clientFor(address: string): ClientLookup {
    const registered = this.#clients.get(address)
    if (registered !== undefined) return { ok: true, client: registered }
    if (this.#options.requireClientPolicy) return { ok: false, reason: UNKNOWN_CLIENT_REASON }
    return { ok: true, client: this.#global }
  }

  #holder(policy: EgressPolicy): PolicyHolder {
    return new PolicyHolder(
      policy,
      this.#options.resolverCacheTtlMs,
      this.#options.resolverTimeoutMs,
    )
  }
}

/**
 * The key a client is known by: its source address in canonical form, with
 * IPv4-mapped addresses (what a dual-stack listener reports) unwrapped, so
 * `::ffff:172.18.0.2` and `172.18.0.2` are the same client.
 */
export function canonicalClientAddress(address: string | undefined): string | undefined {
  if (address === undefined) return undefined
  const ip = parseIpLiteral(address)
  return ip === undefined ? undefined : unwrapMappedIpv4(ip).address
}
