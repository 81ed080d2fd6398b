import { SandboxCredentialRefusedError, type SandboxId } from '@cordon/core'
import { describe, expect, it } from 'vitest'
import {
  CREATED_TAG,
  claimTags,
  decodeReconnectState,
  encodeReconnectState,
  groupFacts,
  hasEnded,
  isExpiredDetached,
  listingOf,
} from '../src/detached-groups.js'

const id = 'sbx_abcdefghijklmnopqrstuvwxyz' as SandboxId
const now = 1_800_000_000_000

function document(tags: Record<string, string>, extra: Record<string, unknown> = {}) {
  return {
    name: 'cordon-abcdefghijklmnopqrstuvwxyz',
    tags,
    properties: { provisioningState: 'Succeeded', ...extra },
  }
}

const detachedTags = {
  'cordon.managed': '1',
  'cordon.provider': 'prv_creator',
  'cordon.sandbox': id,
  ...claimTags({ detached: true, lifetimeMs: 60_000 }, now),
}

describe('detached ACI groups', () => {
  it('tags a detached claim with its end time and its creation, and an attached one with its creation only', () => {
    expect(claimTags({ detached: true, lifetimeMs: 60_000 }, now)).toEqual({
      [CREATED_TAG]: String(now),
      'cordon.detached': '1',
      'cordon.expires': String(now + 60_000),
    })
    expect(claimTags({ detached: false, lifetimeMs: 60_000 }, now)).toEqual({
      [CREATED_TAG]: String(now),
    })
  })

  it('lists every detached group and the provider’s own, with status, labels, age and end time', () => {
    const facts = groupFacts(document(detachedTags))
    expect(listingOf(facts, 'prv_someone_else', now + 1)).toEqual([
      {
        id,
        status: 'running',
        labels: detachedTags,
        createdAt: now,
        endsAt: now + 60_000,
        detached: true,
      },
    ])
    // Past its end time, or stopped, it is ending.
    expect(listingOf(facts, 'prv_x', now + 60_000)[0]?.status).toBe('ending')
    const stopped = groupFacts(document(detachedTags, { instanceView: { state: 'Stopped' } }))
    expect(listingOf(stopped, 'prv_x', now)[0]?.status).toBe('ending')
    // ARM's systemData wins over the tag for the age.
    const withSystemData = groupFacts({
      ...document(detachedTags),
      systemData: { createdAt: new Date(now - 5_000).toISOString() },
    })
    expect(withSystemData.createdAt).toBe(now - 5_000)

    const attached = {
      'cordon.managed': '1',
      'cordon.provider': 'prv_creator',
      'cordon.sandbox': id,
      ...claimTags({ detached: false, lifetimeMs: undefined }, now),
    }
    expect(listingOf(groupFacts(document(attached)), 'prv_creator', now)).toHaveLength(1)
    expect(listingOf(groupFacts(document(attached)), 'prv_other', now)).toEqual([])
    // Not cordon's: never listed.
    expect(listingOf(groupFacts(document({ 'cordon.sandbox': id })), 'prv_creator', now)).toEqual(
      [],
    )
  })

  it('sweeps only detached groups of cordon’s past their end time', () => {
    expect(isExpiredDetached(groupFacts(document(detachedTags)), now + 60_000)).toBe(true)
    expect(isExpiredDetached(groupFacts(document(detachedTags)), now + 59_999)).toBe(false)
    const attached = { ...detachedTags, 'cordon.detached': '0' }
    expect(isExpiredDetached(groupFacts(document(attached)), now + 120_000)).toBe(false)
    const foreign = { ...detachedTags, 'cordon.managed': '0' }
    expect(isExpiredDetached(groupFacts(document(foreign)), now + 120_000)).toBe(false)
    expect(
      hasEnded(groupFacts(document(detachedTags, { provisioningState: 'Deleting' })), now),
    ).toBe(true)
  })

  it('keeps the creator’s state in the credential and refuses a credential without it', () => {
    const state = { secret: 's'.repeat(43), env: { A: '1' }, workingDirectory: '/mnt/x' }
    expect(decodeReconnectState(encodeReconnectState(state), id)).toEqual(state)
    for (const text of ['not json', '{}', JSON.stringify({ secret: 'x', workingDirectory: '/' })]) {
      expect(() => decodeReconnectState(text, id)).toThrow(SandboxCredentialRefusedError)
    }
  })
})
