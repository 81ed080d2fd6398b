/**
 * Answers a `resolver` egress policy's `resolve()` can give, with what every
 * enforcer must make of each. Core's `askResolver` is the rule; an enforcer
 * (a gateway, a control plane, a proxy, a third-party backend) runs these
 * answers through its own path and checks it lands where the rule does.
 *
 * The rule fails closed: one entry that is not a valid allowlist entry, an
 * answer that is not a list of strings, a resolver that throws or rejects,
 * and one that does not answer within the enforcer's resolver timeout, all
 * deny everything.
 */

/** Hosts every case is probed with; `reachable` below names the ones that pass. */
export const RESOLVER_PROBE_HOSTS = [
  'api.example.com',
  'deep.example.org',
  'other.example.net',
] as const

export type ResolverProbeHost = (typeof RESOLVER_PROBE_HOSTS)[number]

export type ResolverAnswerVerdict =
  | {
      /** The answer is enforced as this allowlist (exactly what `resolve()` returned). */
      readonly kind: 'enforce'
      readonly allowedHosts: readonly string[]
      /** The probe hosts the allowlist lets through; the others are refused. */
      readonly reachable: readonly ResolverProbeHost[]
    }
  | { readonly kind: 'deny-everything' }

export interface ResolverAnswerCase {
  readonly name: string
  readonly resolve: () => Promise<readonly string[]>
  readonly verdict: ResolverAnswerVerdict
  /** Settles only through the enforcer's resolver timeout (budget the case for it). */
  readonly hangs?: boolean
}

const answer = (value: unknown) => (): Promise<readonly string[]> =>
  Promise.resolve(value as readonly string[])

const DENY = { kind: 'deny-everything' } as const

export const RESOLVER_ANSWER_CASES: readonly ResolverAnswerCase[] = [
  {
    name: 'valid exact and domain entries, in any case and with a trailing dot',
    resolve: answer(['API.Example.com.', '.example.org']),
    verdict: {
      kind: 'enforce',
      allowedHosts: ['API.Example.com.', '.example.org'],
      reachable: ['api.example.com', 'deep.example.org'],
    },
  },
  {
    name: 'an empty list',
    resolve: answer([]),
    verdict: { kind: 'enforce', allowedHosts: [], reachable: [] },
  },
  {
    name: 'one wildcard entry among valid ones',
    resolve: answer(['api.example.com', '*.example.org']),
    verdict: DENY,
  },
  {
    name: 'one entry with a port',
    resolve: answer(['api.example.com', 'deep.example.org:443']),
    verdict: DENY,
  },
  { name: 'a URL instead of a host', resolve: answer(['https://api.example.com/']), verdict: DENY },
  { name: 'an empty string entry', resolve: answer(['api.example.com', '']), verdict: DENY },
  { name: 'a non-string entry', resolve: answer(['api.example.com', 42]), verdict: DENY },
  { name: 'a string instead of a list', resolve: answer('api.example.com'), verdict: DENY },
  { name: 'undefined', resolve: answer(undefined), verdict: DENY },
  {
    name: 'a rejected promise',
    resolve: () => Promise.reject(new Error('policy service down')),
    verdict: DENY,
  },
  {
    name: 'a synchronous throw',
    resolve: () => {
      throw new Error('policy service down')
    },
    verdict: DENY,
  },
  {
    name: 'no answer at all',
    resolve: () => new Promise<readonly string[]>(() => {}),
    verdict: DENY,
    hangs: true,
  },
]
