import { z } from 'zod'
import { parseAllowlistEntry } from './host-allowlist.js'

const allowedHostSchema = z.string().refine((entry) => parseAllowlistEntry(entry) !== undefined, {
  message:
    'not a valid allowlist entry: use an exact host name ("api.example.com") or a leading dot for a domain and its subdomains (".example.com"); no ports, paths or wildcards',
})

/**
 * What a sandbox may reach on the network.
 *
 * - `deny-all` (the default): no network at all, not even DNS.
 * - `allow-all`: the public internet through the egress gateway. Private,
 *   loopback and metadata addresses stay unreachable.
 * - `static`: only the listed hosts, through the egress gateway.
 * - `resolver`: the list the host's closure returns, asked when the sandbox is
 *   created and refreshed briefly cached by the gateway. The closure takes no
 *   arguments on purpose: it captures whatever tenant or run context the host
 *   has. If it throws, everything is denied.
 */
export const egressPolicySchema = z.discriminatedUnion('kind', [
  z.object({ kind: z.literal('deny-all') }).readonly(),
  z.object({ kind: z.literal('allow-all') }).readonly(),
  z
    .object({ kind: z.literal('static'), allowedHosts: z.array(allowedHostSchema).readonly() })
    .readonly(),
  z
    .object({
      kind: z.literal('resolver'),
      resolve: z.custom<() => Promise<readonly string[]>>((value) => typeof value === 'function', {
        message: 'resolve must be a function returning a promise of allowed hosts',
      }),
    })
    .readonly(),
])

export type EgressPolicy = z.input<typeof egressPolicySchema>
export type EgressPolicyKind = EgressPolicy['kind']

export const DENY_ALL: EgressPolicy = Object.freeze({ kind: 'deny-all' })

/** The run-time change `Sandbox.setNetworkPolicy` accepts. */
export const networkPolicyUpdateSchema = z
  .object({ allowedHosts: z.array(allowedHostSchema).readonly() })
  .readonly()
export type SandboxNetworkPolicyUpdate = z.input<typeof networkPolicyUpdateSchema>
