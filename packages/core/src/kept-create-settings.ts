import { z } from 'zod'
import type { SandboxBackendOptions } from './backend.js'
import { durationMsSchema, environmentSchema } from './config.js'
import { SANDBOX_DEFAULT_TIMEOUT_MS } from './constants.js'
import { type EgressPolicy, egressPolicySchema } from './egress-policy.js'
import type { SandboxBackendEnforcement } from './enforcement.js'
import { SandboxControlRefusedError } from './errors.js'
import { policyOfRecord } from './recorded-egress.js'
import type { SandboxId } from './sandbox-id.js'

/**
 * What a detached sandbox's credential keeps of the create that made it
 * (the provider's request to the backend, its defaults applied), so that a
 * host that connects times its commands and makes its forks as the
 * creator's handle does: with the same environment, working directory,
 * limits, egress policy, exec timeout and lifetime. The environment may
 * hold secrets, so this is kept where the credential is and nowhere else
 * (the host's own storage, the credential store's 0600 files), never in a
 * label or anything the engine shows.
 */
export interface KeptCreateSettings {
  readonly env: Readonly<Record<string, string>>
  readonly workingDirectory: string
  /** Default timeout of each exec, in ms. */
  readonly timeoutMs: number
  /** The lifetime the create asked for, in ms (a fork's, counted from the fork). */
  readonly lifetimeMs: number
  /** Where the host named one; else the backend's default applies, to a fork as to the create. */
  readonly memoryLimitMb?: number
  readonly maxProcesses?: number
  /** Absent for a `resolver` policy, whose function cannot be kept. */
  readonly egress?: Exclude<EgressPolicy, { readonly kind: 'resolver' }>
}

const keptCreateSettingsSchema = z
  .object({
    env: environmentSchema,
    workingDirectory: z.string().min(1),
    timeoutMs: durationMsSchema(),
    lifetimeMs: durationMsSchema(),
    memoryLimitMb: z.number().int().positive().optional(),
    maxProcesses: z.number().int().positive().optional(),
    egress: egressPolicySchema
      .refine((policy) => policy.kind !== 'resolver', 'a resolver policy is never kept')
      .optional(),
  })
  .strict()

/** What the credential of a detached sandbox made with `request` keeps. */
export function keepCreateSettings(request: SandboxBackendOptions): KeptCreateSettings {
  const { egress, memoryLimitMb, maxProcesses, lifetimeMs } = request
  return {
    env: request.env ?? {},
    workingDirectory: request.workingDirectory,
    timeoutMs: request.timeoutMs ?? SANDBOX_DEFAULT_TIMEOUT_MS,
    // The provider makes a detached sandbox only with a lifetime (detached-create.ts).
    lifetimeMs: lifetimeMs!,
    ...(memoryLimitMb !== undefined ? { memoryLimitMb } : {}),
    ...(maxProcesses !== undefined ? { maxProcesses } : {}),
    ...(egress && egress.kind !== 'resolver' ? { egress } : {}),
  }
}

/** `value` as kept settings, or undefined where it is not what {@link keepCreateSettings} makes. */
export function parseKeptCreateSettings(value: unknown): KeptCreateSettings | undefined {
  const parsed = keptCreateSettingsSchema.safeParse(value)
  return parsed.success ? (parsed.data as KeptCreateSettings) : undefined
}

/**
 * The request each fork of a sandbox reached with `connect()` is made
 * with: what its credential keeps, as the creator's handle forks with its
 * own request. Where the credential keeps no policy (the creator's was a
 * `resolver`), the policy the sandbox reports enforcing (a backend that
 * enforced the resolver's answer at create reports that list); one that
 * reports only `resolver` is refused naming `egress`. A credential that
 * keeps no settings at all gets what a create from the sandbox's snapshot
 * would: its reported limits and policy, and the connected handle's
 * timeout and remaining lifetime.
 */
export function connectedForkRequest(
  kept: KeptCreateSettings | undefined,
  source: {
    readonly sandboxId: SandboxId
    readonly backend: string
    readonly enforcement: SandboxBackendEnforcement
    /** The connected handle's own request (its timeout, remaining lifetime, working directory). */
    readonly handle: SandboxBackendOptions
  },
): SandboxBackendOptions {
  const reported = source.enforcement
  const egress = kept?.egress ?? policyOfRecord(reported.egress)
  if (!egress)
    throw new SandboxControlRefusedError(
      'egress',
      source.backend,
      `${source.sandboxId} was created with a resolver policy, whose function its credential cannot keep, so its forks cannot have it`,
    )
  const limits = kept ?? reported.limits
  return {
    ...source.handle,
    ...(kept
      ? {
          env: kept.env,
          workingDirectory: kept.workingDirectory,
          timeoutMs: kept.timeoutMs,
          lifetimeMs: kept.lifetimeMs,
        }
      : {}),
    ...(limits.memoryLimitMb !== undefined ? { memoryLimitMb: limits.memoryLimitMb } : {}),
    ...(limits.maxProcesses !== undefined ? { maxProcesses: limits.maxProcesses } : {}),
    egress,
  }
}
