import { describe, expect, it, vi } from 'vitest'
import { CredentialBroker } from '../src/credential-broker.js'
import { canonicalClientAddress, PolicyHolder, PolicyState } from '../src/policy-state.js'
import { sleep } from './helpers.js'

describe('PolicyHolder', () => {
  it('applies deny-all, allow-all and static lists', async () => {
    expect(await new PolicyHolder({ kind: 'deny-all' }, 1000, 1000).evaluate('a.example')).toBe(
      'policy-deny-all',
    )
    expect(await new PolicyHolder({ kind: 'allow-all' }, 1000, 1000).evaluate('a.example')).toBe(
      'allowed',
    )
    const listed = new PolicyHolder({ kind: 'static', allowedHosts: ['.example.com'] }, 1000, 1000)
    expect(await listed.evaluate('api.example.com')).toBe('allowed')
    expect(await listed.evaluate('example.org')).toBe('host-not-allowed')
    expect(
      await new PolicyHolder({ kind: 'static', allowedHosts: [] }, 1000, 1000).evaluate('a.b'),
    ).toBe('host-not-allowed')
  })

  it('caches a resolver answer briefly and shares one call between concurrent requests', async () => {
    const resolve = vi.fn(async () => ['a.example'])
    // A second's cache, so that a loaded machine's pauses stay inside it.
    const holder = new PolicyHolder({ kind: 'resolver', resolve }, 1_000, 1000)
    const verdicts = await Promise.all([holder.evaluate('a.example'), holder.evaluate('b.example')])
    expect(verdicts).toEqual(['allowed', 'host-not-allowed'])
    expect(resolve).toHaveBeenCalledTimes(1)
    await holder.evaluate('a.example')
    expect(resolve).toHaveBeenCalledTimes(1)
    await sleep(1_100)
    await holder.evaluate('a.example')
    expect(resolve).toHaveBeenCalledTimes(2)
  })

  it('denies when the resolver throws, times out or answers nonsense, and asks again next time', async () => {
    let mode: 'throw' | 'hang' | 'junk' | 'ok' = 'throw'
    const resolve = vi.fn(async (): Promise<readonly string[]> => {
      if (mode === 'throw') throw new Error('tenant service down')
      if (mode === 'hang') return new Promise<readonly string[]>(() => {})
      if (mode === 'junk') return [42] as unknown as string[]
      return ['a.example']
    })
    const holder = new PolicyHolder({ kind: 'resolver', resolve }, 10_000, 50)
    expect(await holder.evaluate('a.example')).toBe('resolver-failed')
    mode = 'hang'
    expect(await holder.evaluate('a.example')).toBe('resolver-failed')
    mode = 'junk'
    expect(await holder.evaluate('a.example')).toBe('resolver-failed')
    mode = 'ok'
    expect(await holder.evaluate('a.example')).toBe('allowed')
    expect(resolve).toHaveBeenCalledTimes(4)
  })

  it('does not let a later change to the returned array widen the cached list', async () => {
    const list = ['a.example']
    const holder = new PolicyHolder({ kind: 'resolver', resolve: async () => list }, 10_000, 1000)
    expect(await holder.evaluate('b.example')).toBe('host-not-allowed')
    list.push('b.example')
    expect(await holder.evaluate('b.example')).toBe('host-not-allowed')
  })
})

describe('PolicyState', () => {
  const options = { requireClientPolicy: false, resolverCacheTtlMs: 1000, resolverTimeoutMs: 1000 }

  it('gives unregistered clients the global policy, registered ones their own', async () => {
    const state = new PolicyState({ kind: 'deny-all' }, CredentialBroker.empty, options)
    state.setClient('10.0.0.2', 'sbx_one', { kind: 'allow-all' }, undefined)
    const known = state.clientFor('10.0.0.2')
    const unknown = state.clientFor('10.0.0.3')
    expect(known.ok && (await known.client.holder.evaluate('x.example'))).toBe('allowed')
    expect(known.ok && known.client.clientId).toBe('sbx_one')
    expect(unknown.ok && (await unknown.client.holder.evaluate('x.example'))).toBe(
      'policy-deny-all',
    )
    expect(state.removeClient('10.0.0.2')).toBe(true)
    expect(state.removeClient('10.0.0.2')).toBe(false)
  })

  it('refuses unregistered clients when registrations are required', () => {
    const state = new PolicyState({ kind: 'allow-all' }, CredentialBroker.empty, {
      ...options,
      requireClientPolicy: true,
    })
    expect(state.clientFor('10.0.0.9')).toEqual({ ok: false, reason: 'client-unknown' })
  })

  it('lets a policy change win over a resolver call in flight when it was made', async () => {
    let settle: ((hosts: string[]) => void) | undefined
    const resolve = () =>
      new Promise<string[]>((resolve) => {
        settle = resolve
      })
    for (const change of ['client', 'global'] as const) {
      const state = new PolicyState({ kind: 'resolver', resolve }, CredentialBroker.empty, options)
      state.setClient('10.0.0.2', 'sbx_one', { kind: 'resolver', resolve }, undefined)
      const before = state.clientFor(change === 'client' ? '10.0.0.2' : '10.0.0.3')
      const pending = before.ok ? before.client.holder.evaluate('old.example') : undefined
      if (change === 'client')
        state.setClient('10.0.0.2', 'sbx_one', { kind: 'static', allowedHosts: [] }, undefined)
      else state.setGlobalPolicy({ kind: 'static', allowedHosts: [] })
      await vi.waitFor(() => expect(settle).toBeDefined())
      settle?.(['old.example'])
      settle = undefined
      // The request that asked before the change keeps its answer; nothing after it does.
      expect(await pending).toBe('allowed')
      const after = state.clientFor(change === 'client' ? '10.0.0.2' : '10.0.0.3')
      expect(after.ok && (await after.client.holder.evaluate('old.example'))).toBe(
        'host-not-allowed',
      )
    }
  })

  it('keys clients by canonical address, so a dual-stack listener sees the same client', () => {
    expect(canonicalClientAddress('::ffff:172.18.0.2')).toBe('172.18.0.2')
    expect(canonicalClientAddress('0:0:0:0:0:0:0:1')).toBe('::1')
    expect(canonicalClientAddress('not an address')).toBeUndefined()
  })
})
