import { describe, expect, it } from 'vitest'
import { cleanupFailureEvent, newSandboxId } from '../src/backend-kit.js'
import { fetchBearerToken } from '../src/bearer-token.js'
import { SandboxBackendUnavailableError } from '../src/index.js'

describe('fetchBearerToken', () => {
  it('returns the token the host closure gives', async () => {
    await expect(
      fetchBearerToken(async () => 'abc', 'microvm:self-hosted', 'getToken', 'the control plane'),
    ).resolves.toBe('abc')
  })

  it('reports a throwing or empty closure as the backend being unavailable, keeping the cause', async () => {
    const cause = new Error('identity service down')
    const thrown = await fetchBearerToken(
      async () => {
        throw cause
      },
      'container:aci-standby-pool',
      'getArmToken',
      'Azure Resource Manager',
    ).catch((caught: unknown) => caught)
    expect(SandboxBackendUnavailableError.isInstance(thrown)).toBe(true)
    expect((thrown as Error).cause).toBe(cause)
    expect((thrown as Error).message).toContain('getArmToken() failed')
    const empty = await fetchBearerToken(async () => '', 'x', 'getToken', 'y').catch(
      (caught: unknown) => caught,
    )
    expect(SandboxBackendUnavailableError.isInstance(empty)).toBe(true)
  })
})

describe('cleanupFailureEvent', () => {
  it('names what was left behind', () => {
    const id = newSandboxId()
    expect(
      cleanupFailureEvent(id, 'microvm:self-hosted', 'deleting the guest', new Error('503')),
    ).toMatchObject({
      type: 'lifecycle',
      phase: 'create.failed',
      sandboxId: id,
      backend: 'microvm:self-hosted',
      error: { name: 'CleanupError', message: 'deleting the guest failed: 503' },
    })
  })
})
