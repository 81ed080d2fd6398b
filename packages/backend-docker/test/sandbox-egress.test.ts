/**
 * The Docker backend applies core's one resolver rule: the shared table of
 * answers (from @cordon/conformance, which the egress proxy and the microVM
 * backend run too) reaches the gateway as the allowlist the rule gives, or as
 * an empty list with the refusal reported. egress-gateway.test.ts proves the
 * gateway enforces what it is sent, from inside real sandboxes.
 */
import { RESOLVER_ANSWER_CASES } from '@cordon/conformance'
import { DEFAULT_RESOLVER_TIMEOUT_MS } from '@cordon/core/backend'
import { afterEach, describe, expect, it, vi } from 'vitest'
import type { EgressGateway } from '../src/egress-gateway.js'
import { RESOLVER_REFRESH_MS, SandboxEgress } from '../src/sandbox-egress.js'

/** Records what the backend registers; the real gateway's protocol is tested live elsewhere. */
function recordingGateway() {
  const registered: unknown[] = []
  const gateway = {
    addClient: async (_id: string, policy: unknown) => {
      registered.push(policy)
    },
    setPolicy: async (_id: string, policy: unknown) => {
      registered.push(policy)
    },
    removeClient: async () => {},
  }
  return { gateway: gateway as unknown as EgressGateway, registered }
}

describe.each(RESOLVER_ANSWER_CASES)(
  'a resolver answering $name',
  ({ resolve, verdict, hangs }) => {
    it(
      'registers the allowlist the rule gives, or an empty one with the refusal reported',
      async () => {
        const { gateway, registered } = recordingGateway()
        const refusals: string[] = []
        const egress = await SandboxEgress.register(
          gateway,
          'sbx_test',
          { kind: 'resolver', resolve },
          [],
          (problem) => refusals.push(problem),
        )
        await egress.close()
        const allowedHosts = verdict.kind === 'enforce' ? verdict.allowedHosts : []
        expect(registered).toEqual([{ kind: 'static', allowedHosts }])
        expect(refusals).toHaveLength(verdict.kind === 'enforce' ? 0 : 1)
      },
      hangs ? DEFAULT_RESOLVER_TIMEOUT_MS + 5_000 : undefined,
    )
  },
)

describe('a policy change while a resolver refresh is in flight', () => {
  afterEach(() => {
    vi.useRealTimers()
  })

  it('wins: the refresh answer that arrives afterwards is dropped, and no refresh follows', async () => {
    vi.useFakeTimers()
    const { gateway, registered } = recordingGateway()
    let settleRefresh: (hosts: string[]) => void = () => {}
    let calls = 0
    const resolve = (): Promise<string[]> => {
      calls++
      if (calls === 1) return Promise.resolve(['old.example'])
      return new Promise((settle) => {
        settleRefresh = settle
      })
    }
    const egress = await SandboxEgress.register(
      gateway,
      'sbx_test',
      { kind: 'resolver', resolve },
      [],
      () => {},
    )
    await vi.advanceTimersByTimeAsync(RESOLVER_REFRESH_MS)
    expect(calls, 'the refresh has asked the resolver').toBe(2)

    await egress.setAllowedHosts({ allowedHosts: [] })
    settleRefresh(['old.example'])
    await vi.advanceTimersByTimeAsync(RESOLVER_REFRESH_MS * 3)
    await egress.close()

    expect(registered.at(-1)).toEqual({ kind: 'static', allowedHosts: [] })
    expect(registered).toEqual([
      { kind: 'static', allowedHosts: ['old.example'] },
      { kind: 'static', allowedHosts: [] },
    ])
    expect(calls, 'no refresh after the change').toBe(2)
  })
})
