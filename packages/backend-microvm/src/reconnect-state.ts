import { SandboxCredentialRefusedError, type SandboxId } from '@cordon/core'
import { LABEL, type SandboxListing } from '@cordon/core/backend'
import type { SandboxDescriptionBody } from './control-plane-types.js'

/**
 * Detached microVM sandboxes: the labels that mark a guest as detached with
 * its end time, and what a host keeps to reach one again. The orchestrator
 * deletes the guest when its `timeoutMs` runs out, whether or not any host
 * comes back; it never returns the agent secret, which only the host's
 * credential holds.
 */

/** What the creator keeps for a connection (inside the host's credential, never in a label). */
export interface MicroVMReconnectState {
  readonly secret: string
  /** The create's `env`: every command's environment is laid over it, as the creator's. */
  readonly env: Readonly<Record<string, string>>
  readonly workingDirectory: string
  readonly memoryLimitMb: number
  readonly maxProcesses: number
  /** What `sandbox.enforced.egress` reports; the orchestrator enforces it. */
  readonly egress: ReportedEgress
}

/** An egress policy as a sandbox reports it and a label keeps it (a resolver's function is not kept). */
export type ReportedEgress =
  | { readonly kind: 'deny-all' | 'allow-all' | 'resolver' }
  | { readonly kind: 'static'; readonly allowedHosts: readonly string[] }

export function encodeReconnectState(state: MicroVMReconnectState): string {
  return JSON.stringify(state)
}

export function decodeReconnectState(text: string, sandboxId: SandboxId): MicroVMReconnectState {
  try {
    const state = JSON.parse(text) as MicroVMReconnectState
    if (
      typeof state.secret === 'string' &&
      typeof state.workingDirectory === 'string' &&
      typeof state.env === 'object' &&
      state.env !== null &&
      typeof state.memoryLimitMb === 'number' &&
      typeof state.maxProcesses === 'number' &&
      typeof state.egress?.kind === 'string'
    )
      return state
  } catch {
    // Refused below.
  }
  throw new SandboxCredentialRefusedError(
    sandboxId,
    'the credential holds no microVM sandbox state',
  )
}

/** The labels a detached guest carries besides its owner's: it is detached, and when it ends. */
export function detachedLabels(endsAt: number): Record<string, string> {
  return { [LABEL.detached]: '1', [LABEL.expires]: String(endsAt) }
}

/**
 * Whether a guest is a detached one of cordon's whose end time
 * (`cordon.expires`) has passed: the sweep's to delete, paused or not.
 */
export function hasPassedEndTime(guest: SandboxDescriptionBody, now: number): boolean {
  const endsAt = Number(guest.labels[LABEL.expires])
  return (
    guest.labels[LABEL.managed] === '1' &&
    guest.labels[LABEL.detached] === '1' &&
    Number.isFinite(endsAt) &&
    endsAt > 0 &&
    now >= endsAt
  )
}

/**
 * A guest as `provider.list()` shows it, when the provider may reach it:
 * every detached guest (any process holding its credential may connect)
 * and the provider's own.
 */
export function listingOf(guest: SandboxDescriptionBody, providerId: string): SandboxListing[] {
  const labels = guest.labels
  const id = labels[LABEL.sandbox]
  const detached = labels[LABEL.detached] === '1'
  if (labels[LABEL.managed] !== '1' || !id?.startsWith('sbx_') || id !== guest.sandboxId) return []
  if (!detached && labels[LABEL.provider] !== providerId) return []
  const expires = Number(labels[LABEL.expires])
  return [
    {
      id: id as SandboxId,
      status: guest.state === 'paused' ? 'paused' : 'running',
      labels,
      createdAt: guest.createdAt ?? 0,
      endsAt: Number.isFinite(expires) && expires > 0 ? expires : undefined,
      detached,
    },
  ]
}
