import { z } from 'zod'
import { parseAllowlistEntry } from './host-allowlist.js'

/**
 * What a sandbox may reach on the network.
 *
 * - `deny-all` (the default): no network at all, not even DNS.
 * - `allow-all`: the public internet through the egress gateway. Private,
 *   loopback and metadata addresses stay unreachable.
 * - `static`: only the listed hosts, through the egress gateway.
 * - `resolver`: the list the host's closure returns, asked when the sandbox is
 *   created and refreshed while it runs. The closure takes no arguments on
 *   purpose: it captures whatever tenant or run context the host has. If it
 *   throws, does not answer within 5 s, or returns anything but a list of
 *   valid entries (one invalid entry is enough), everything is denied: one
 *   rule for every backend (see `askResolver` in `@cordon/core/backend`).
 *
 * Allowlist entries are exact host names (`api.example.com`) or a leading dot
 * for a domain and all its subdomains (`.example.com`); matching is
 * case-insensitive and ignores one trailing dot.
 */
export type EgressPolicy =
  | { readonly kind: 'deny-all' }
  | { readonly kind: 'allow-all' }
  | { readonly kind: 'static'; readonly allowedHosts: readonly string[] }
  | { readonly kind: 'resolver'; readonly resolve: () => Promise<readonly string[]> }

export type EgressPolicyKind = EgressPolicy['kind']

export const DENY_ALL: EgressPolicy = Object.freeze({ kind: 'deny-all' })

const allowedHostSchema = z.string().refine((entry) => parseAllowlistEntry(entry) !== undefined, {
  message:
    'not a valid allowlist entry: use an exact host name ("api.example.com") or a leading dot for a domain and its subdomains (".example.com"); no ports, paths or wildcards',
})

/** Validates an {@link EgressPolicy}; unknown keys are refused. */
export const egressPolicySchema: z.ZodType<EgressPolicy> = z.discriminatedUnion('kind', [
  z
    .object({ kind: z.literal('deny-all') })
    .strict()
    .readonly(),
  z
    .object({ kind: z.literal('allow-all') })
    .strict()
    .readonly(),
  z
    .object({ kind: z.literal('static'), allowedHosts: z.array(allowedHostSchema).readonly() })
    .strict()
    .readonly(),
  z
    .object({
      kind: z.literal('resolver'),
      resolve: z.custom<() => Promise<readonly string[]>>((value) => typeof value === 'function', {
        message: 'resolve must be a function returning a promise of allowed hosts',
      }),
    })
    .strict()
    .readonly(),
])

/** Validates what `Sandbox.setNetworkPolicy` accepts (`SandboxNetworkPolicy`). */
export const networkPolicySchema = z
  .object({ allowedHosts: z.array(allowedHostSchema).readonly() })
  .strict()
  .readonly()
