/**
 * `EgressProxyOptions`: what a host may configure, validated once at
 * construction with every problem reported together.
 */
import {
  type BrokeredCredential,
  brokeredCredentialSchema,
  type EgressPolicy,
  egressPolicySchema,
  SandboxControlRefusedError,
} from '@cordon/core'
import {
  type CompiledAllowlist,
  compileAllowlist,
  DEFAULT_RESOLVER_TIMEOUT_MS,
  DENY_ALL,
  parseAllowlistEntry,
  parseConfig,
} from '@cordon/core/backend'
import { z } from 'zod'
import { checkCredentials } from './credential-broker.js'
import type { EgressDecisionListener } from './decision-event.js'
import { looksLikeIpLiteral } from './ip-literal.js'
import type { UpstreamTlsOptions } from './pinned-dial.js'
import { canonicalClientAddress } from './policy-state.js'
import type { Endpoint } from './proxy-self.js'
import type { EgressLookup } from './resolve-and-screen.js'

export interface EgressProxyLimits {
  /**
   * Upstream connections open at once, across all clients: CONNECT tunnels
   * and forwarded HTTP requests in flight (each holds one). Default 1024.
   */
  readonly maxTunnels?: number
  /** The same, per client source address, so one sandbox cannot starve the rest. Default: `maxTunnels`. */
  readonly maxTunnelsPerClient?: number
  /** Client connections the listener accepts at once. Default 4096. */
  readonly maxClientConnections?: number
  /**
   * Connections one client's socket (`listenForClient`) accepts at once.
   * Default: `maxClientConnections`.
   */
  readonly maxConnectionsPerClient?: number
  /** Budget for reaching the upstream, across all its screened addresses. Default 10 s. */
  readonly connectTimeoutMs?: number
  /** Budget for one DNS lookup; a lookup that overruns is refused with `dns-timeout`. Default 5 s. */
  readonly dnsTimeoutMs?: number
  /** A tunnel or exchange with no traffic either way for this long is closed. Default 120 s. */
  readonly idleTimeoutMs?: number
  /**
   * Budget for a `resolver` policy's `resolve()`; overrunning denies everything.
   * Default: core's `DEFAULT_RESOLVER_TIMEOUT_MS` (5 s), the budget every enforcer uses.
   */
  readonly resolverTimeoutMs?: number
}

export interface EgressProxyOptions {
  /**
   * The reference's form of a policy: the allowlist, asked for on every
   * request (the same as `policy: { kind: 'resolver', resolve }` with a cache
   * of 0). Give this or `policy`, not both.
   */
  readonly allowedHosts?: () => Promise<readonly string[]>
  /** The reference's name for `brokeredCredentials`. Give one or the other. */
  readonly credentials?: readonly BrokeredCredential[]
  /**
   * The reference's switch for making the upstream leg of a request to a
   * credential's host HTTPS. cordon always does, because a brokered
   * credential must never cross a network in clear: `false` together with
   * credentials is refused with `SandboxControlRefusedError`; without
   * credentials there is nothing to upgrade and it has no effect.
   */
  readonly upgradeToHttps?: boolean
  /** Called with the host and the reason code of every denied request or tunnel. Must not throw. */
  readonly onDenied?: (host: string, reason: string) => void
  /** What clients may reach. Default `deny-all`. */
  readonly policy?: EgressPolicy
  /** Credentials injected upstream; see the README for the placeholder form. */
  readonly brokeredCredentials?: readonly BrokeredCredential[]
  /**
   * Host names (exact, or a leading dot for a domain) whose loopback, private
   * and link-local answers may be dialled. The only way to reach such an
   * address; IP literals are refused here, name the destination instead.
   */
  readonly allowInwardFor?: readonly string[]
  /** Ports a CONNECT or a forwarded request may go to. Default `[443, 80]`. */
  readonly allowedPorts?: readonly number[]
  /** Name resolution. Default: the system resolver, every answer. */
  readonly lookup?: EgressLookup
  readonly limits?: EgressProxyLimits
  /** One event per forwarded request or tunnel, allowed or not. Must not throw. */
  readonly onDecision?: EgressDecisionListener
  /** TLS trust for upstream HTTPS legs (brokered hosts), e.g. a private CA. */
  readonly upstreamTls?: UpstreamTlsOptions
  /**
   * Only clients registered with `setClientPolicy` are served; any other
   * source address is refused. Default `false` (unregistered clients get `policy`).
   */
  readonly requireClientPolicy?: boolean
  /** How long a `resolver` policy's answer is reused. Default 5 s. */
  readonly resolverCacheTtlMs?: number
  /**
   * Further endpoints that count as the proxy itself and are never dialled,
   * whatever the policy (e.g. a control port listening next to the proxy).
   */
  readonly protectedEndpoints?: readonly Endpoint[]
}

export interface ResolvedLimits {
  readonly maxTunnels: number
  readonly maxTunnelsPerClient: number
  readonly maxClientConnections: number
  readonly maxConnectionsPerClient: number
  readonly connectTimeoutMs: number
  readonly dnsTimeoutMs: number
  readonly idleTimeoutMs: number
  readonly resolverTimeoutMs: number
}

export interface ResolvedOptions {
  readonly policy: EgressPolicy
  readonly brokeredCredentials: readonly BrokeredCredential[]
  /** `allowInwardFor`, parsed once. */
  readonly allowInwardFor: CompiledAllowlist
  readonly allowedPorts: ReadonlySet<number>
  readonly lookup: EgressLookup | undefined
  readonly limits: ResolvedLimits
  readonly onDecision: EgressDecisionListener | undefined
  readonly upstreamTls: UpstreamTlsOptions | undefined
  readonly requireClientPolicy: boolean
  readonly resolverCacheTtlMs: number
  readonly protectedEndpoints: readonly Endpoint[]
}

const fn = <T>(message: string) => z.custom<T>((value) => typeof value === 'function', { message })
const port = () => z.number().int().min(1).max(65535)
const positiveMs = () => z.number().int().positive().max(2_147_483_647)

const inwardEntrySchema = z
  .string()
  .refine((entry) => parseAllowlistEntry(entry) !== undefined, {
    message: 'not a host name: use "db.internal" or ".internal"',
  })
  .refine((entry) => !looksLikeIpLiteral(entry.replace(/^\./, '')), {
    message: 'IP literals are not accepted: name the destination and resolve it through lookup',
  })

export const credentialListSchema = z
  .array(brokeredCredentialSchema)
  .readonly()
  .superRefine((credentials, ctx) => {
    for (const issue of checkCredentials(credentials)) {
      ctx.addIssue({ code: 'custom', path: issue.path.split('.'), message: issue.message })
    }
  })

const limitsSchema = z
  .object({
    maxTunnels: z.number().int().positive().optional(),
    maxTunnelsPerClient: z.number().int().positive().optional(),
    maxClientConnections: z.number().int().positive().optional(),
    maxConnectionsPerClient: z.number().int().positive().optional(),
    connectTimeoutMs: positiveMs().optional(),
    dnsTimeoutMs: positiveMs().optional(),
    idleTimeoutMs: positiveMs().optional(),
    resolverTimeoutMs: positiveMs().optional(),
  })
  .strict()
  .readonly()

const endpointSchema = z.object({ address: z.string().min(1), port: port() }).readonly()

export const egressProxyOptionsSchema = z
  .object({
    allowedHosts: fn<() => Promise<readonly string[]>>(
      'allowedHosts must be a function returning a promise of allowed hosts',
    ).optional(),
    credentials: credentialListSchema.optional(),
    upgradeToHttps: z.boolean().optional(),
    onDenied: fn<(host: string, reason: string) => void>('onDenied must be a function').optional(),
    policy: egressPolicySchema.optional(),
    brokeredCredentials: credentialListSchema.optional(),
    allowInwardFor: z.array(inwardEntrySchema).readonly().optional(),
    allowedPorts: z.array(port()).readonly().optional(),
    lookup: fn<EgressLookup>(
      'lookup must be a function returning a promise of addresses',
    ).optional(),
    limits: limitsSchema.optional(),
    onDecision: fn<EgressDecisionListener>('onDecision must be a function').optional(),
    upstreamTls: z
      .object({
        ca: z.union([z.string().min(1), z.array(z.string().min(1)).readonly()]).optional(),
      })
      .strict()
      .readonly()
      .optional(),
    requireClientPolicy: z.boolean().optional(),
    resolverCacheTtlMs: z.number().int().min(0).max(3_600_000).optional(),
    protectedEndpoints: z.array(endpointSchema).readonly().optional(),
  })
  .strict()
  .superRefine((options, ctx) => {
    if (options.allowedHosts && options.policy) {
      ctx.addIssue({
        code: 'custom',
        path: ['allowedHosts'],
        message: 'give allowedHosts or policy, not both',
      })
    }
    if (options.credentials && options.brokeredCredentials) {
      ctx.addIssue({
        code: 'custom',
        path: ['credentials'],
        message: 'give credentials or brokeredCredentials, not both',
      })
    }
  })

/** A run-time client registration, checked as a whole so every problem is reported together. */
export const clientRegistrationSchema = z.object({
  clientAddress: z.string().refine((address) => canonicalClientAddress(address) !== undefined, {
    message: 'must be an IP address (the client source address the proxy sees)',
  }),
  clientId: z.string().min(1, 'must be a non-empty label').max(256),
  policy: egressPolicySchema,
  brokeredCredentials: credentialListSchema.optional(),
})

/** Validates options and fills defaults; throws one error listing every problem. */
export function resolveOptions(input: EgressProxyOptions | undefined): ResolvedOptions {
  const parsed = parseConfig(egressProxyOptionsSchema, input ?? {}, 'egress proxy options')
  const credentials = parsed.brokeredCredentials ?? parsed.credentials ?? []
  if (parsed.upgradeToHttps === false && credentials.length > 0) {
    throw new SandboxControlRefusedError(
      'upgradeToHttps',
      'egress-proxy',
      'a brokered credential is never sent over plain HTTP; remove upgradeToHttps: false (the sandbox may still speak http:// to the proxy, and the proxy makes the upstream leg HTTPS)',
    )
  }
  const maxTunnels = parsed.limits?.maxTunnels ?? 1024
  return {
    // The parsed copy: a later change to the caller's allowedHosts array must
    // not change the policy behind the proxy's back (the resolver closure is
    // kept as the same function).
    policy: parsed.allowedHosts
      ? { kind: 'resolver', resolve: parsed.allowedHosts }
      : ((parsed.policy as EgressPolicy | undefined) ?? DENY_ALL),
    brokeredCredentials: credentials,
    allowInwardFor: compileAllowlist(parsed.allowInwardFor ?? []),
    allowedPorts: new Set(parsed.allowedPorts ?? [443, 80]),
    lookup: parsed.lookup,
    limits: {
      maxTunnels,
      maxTunnelsPerClient: parsed.limits?.maxTunnelsPerClient ?? maxTunnels,
      maxClientConnections: parsed.limits?.maxClientConnections ?? 4096,
      maxConnectionsPerClient:
        parsed.limits?.maxConnectionsPerClient ?? parsed.limits?.maxClientConnections ?? 4096,
      connectTimeoutMs: parsed.limits?.connectTimeoutMs ?? 10_000,
      dnsTimeoutMs: parsed.limits?.dnsTimeoutMs ?? 5_000,
      idleTimeoutMs: parsed.limits?.idleTimeoutMs ?? 120_000,
      resolverTimeoutMs: parsed.limits?.resolverTimeoutMs ?? DEFAULT_RESOLVER_TIMEOUT_MS,
    },
    onDecision: withDeniedCallback(parsed.onDecision, parsed.onDenied),
    upstreamTls: parsed.upstreamTls,
    requireClientPolicy: parsed.requireClientPolicy ?? false,
    // The reference asked its allowedHosts closure on every request.
    resolverCacheTtlMs: parsed.resolverCacheTtlMs ?? (parsed.allowedHosts ? 0 : 5_000),
    protectedEndpoints: parsed.protectedEndpoints ?? [],
  }
}

/** The reference's `onDenied(host, reason)`, fed from the decision events. */
function withDeniedCallback(
  onDecision: EgressDecisionListener | undefined,
  onDenied: ((host: string, reason: string) => void) | undefined,
): EgressDecisionListener | undefined {
  if (!onDenied) return onDecision
  return (event) => {
    if (event.decision === 'deny') {
      try {
        onDenied(event.host, event.reason)
      } catch {
        // A host's callback must not change the decision or the response.
      }
    }
    onDecision?.(event)
  }
}

/** Validates a policy handed to `setPolicy`/`setClientPolicy` at run time. */
export function validatePolicy(policy: EgressPolicy, subject: string): EgressPolicy {
  return parseConfig(egressPolicySchema, policy, subject) as EgressPolicy
}
