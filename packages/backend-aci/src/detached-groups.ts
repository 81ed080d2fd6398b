import { SandboxCredentialRefusedError, type SandboxId } from '@cordon/core'
import { LABEL, type SandboxListing } from '@cordon/core/backend'
import { provisioningStateOf } from './arm-long-running.js'

/**
 * Detached ACI sandboxes as ARM shows them: the tags that mark a claimed
 * group as detached with its end time, what a host keeps to reach one
 * again, and how listings and the sweep of ended ones read a group.
 *
 * Nothing about the secret is in a tag. The group's config map does hold it
 * (ACI mounts it for the entrypoint, and ARM returns it to anyone who may
 * read the group: see the README's limits); the host's credential holds it
 * too, with what the creator chose for every command.
 */

/** Tag with the ms since the epoch at which the group was claimed (lists also carry ARM's `systemData`). */
export const CREATED_TAG = 'cordon.created'

/** What the creator keeps for a connection (inside the host's credential, never in a tag). */
export interface AciReconnectState {
  readonly secret: string
  /** The create's `env`: every command's environment is laid over it, as the creator's. */
  readonly env: Readonly<Record<string, string>>
  readonly workingDirectory: string
}

export function encodeReconnectState(state: AciReconnectState): string {
  return JSON.stringify(state)
}

export function decodeReconnectState(text: string, sandboxId: SandboxId): AciReconnectState {
  try {
    const state = JSON.parse(text) as AciReconnectState
    if (
      typeof state.secret === 'string' &&
      typeof state.workingDirectory === 'string' &&
      typeof state.env === 'object' &&
      state.env !== null
    )
      return state
  } catch {
    // Refused below.
  }
  throw new SandboxCredentialRefusedError(sandboxId, 'the credential holds no ACI sandbox state')
}

/** The tags of a claim: detached ones carry their end time, which the sweep and `list()` read. */
export function claimTags(
  request: { readonly detached: boolean; readonly lifetimeMs: number | undefined },
  now: number,
): Record<string, string> {
  return {
    [CREATED_TAG]: String(now),
    ...(request.detached && request.lifetimeMs !== undefined
      ? { [LABEL.detached]: '1', [LABEL.expires]: String(now + request.lifetimeMs) }
      : {}),
  }
}

/** What cordon reads of one container group document. */
export interface GroupFacts {
  readonly name: string
  readonly tags: Readonly<Record<string, string>>
  readonly sandboxId: SandboxId | undefined
  readonly managed: boolean
  readonly detached: boolean
  /** ms since the epoch; undefined without a (valid) end-time tag. */
  readonly endsAt: number | undefined
  readonly createdAt: number | undefined
  readonly provisioningState: string
  /** The instance view's state (`Running`, `Stopped`, ...); lists carry none. */
  readonly instanceState: string | undefined
}

export function groupFacts(document: unknown): GroupFacts {
  const group = (document ?? {}) as {
    name?: unknown
    tags?: unknown
    systemData?: { createdAt?: unknown }
    properties?: { instanceView?: { state?: unknown } }
  }
  const tags: Record<string, string> = {}
  if (typeof group.tags === 'object' && group.tags !== null)
    for (const [key, value] of Object.entries(group.tags))
      if (typeof value === 'string') tags[key] = value
  const sandbox = tags[LABEL.sandbox]
  const createdFromArm =
    typeof group.systemData?.createdAt === 'string'
      ? Date.parse(group.systemData.createdAt)
      : Number.NaN
  const instance = group.properties?.instanceView?.state
  return {
    name: typeof group.name === 'string' ? group.name : '',
    tags,
    sandboxId: sandbox?.startsWith('sbx_') ? (sandbox as SandboxId) : undefined,
    managed: tags[LABEL.managed] === '1',
    detached: tags[LABEL.detached] === '1',
    endsAt: positive(tags[LABEL.expires]),
    createdAt: Number.isFinite(createdFromArm) ? createdFromArm : positive(tags[CREATED_TAG]),
    provisioningState: provisioningStateOf(document) ?? '',
    instanceState: typeof instance === 'string' ? instance : undefined,
  }
}

/** Whether the group no longer runs the sandbox: being deleted, failed, stopped, or past its end time. */
export function hasEnded(facts: GroupFacts, now: number): boolean {
  if (/^(failed|canceled|cancelled|deleting)$/i.test(facts.provisioningState)) return true
  if (facts.instanceState !== undefined && /^(stopped|failed)$/i.test(facts.instanceState))
    return true
  return facts.endsAt !== undefined && now >= facts.endsAt
}

/**
 * A group as `provider.list()` shows it, when the provider may reach it:
 * every detached sandbox of the resource group (any process holding its
 * credential may connect) and the provider's own.
 */
export function listingOf(facts: GroupFacts, providerId: string, now: number): SandboxListing[] {
  if (!facts.managed || facts.sandboxId === undefined) return []
  if (!facts.detached && facts.tags[LABEL.provider] !== providerId) return []
  return [
    {
      id: facts.sandboxId,
      status: hasEnded(facts, now) ? 'ending' : 'running',
      labels: facts.tags,
      createdAt: facts.createdAt ?? 0,
      endsAt: facts.endsAt,
      detached: facts.detached,
    },
  ]
}

/**
 * Whether the sweep removes the group: a detached sandbox of cordon's whose
 * end time has passed (its agent ended itself then; the group's record is
 * what is left). Nothing else is the sweep's: a group that is not detached
 * belongs to the live host that claimed it.
 */
export function isExpiredDetached(facts: GroupFacts, now: number): boolean {
  return facts.managed && facts.detached && facts.endsAt !== undefined && now >= facts.endsAt
}

function positive(text: string | undefined): number | undefined {
  const value = Number(text)
  return Number.isFinite(value) && value > 0 ? value : undefined
}
