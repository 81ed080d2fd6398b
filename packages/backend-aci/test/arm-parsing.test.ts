import { SandboxTransportError } from '@cordon/core'
import fc from 'fast-check'
import { describe, expect, it } from 'vitest'
import { ArmClient, type ArmResponse } from '../src/arm-client.js'
import { placementRefusal } from '../src/group-placement.js'
import {
  describePoolCounts,
  isPoolExhausted,
  parsePoolRuntimeView,
} from '../src/pool-runtime-view.js'

describe('standby pool runtime view', () => {
  const view = {
    properties: {
      instanceCountSummary: [
        {
          zone: 1,
          instanceCountsByState: [
            { state: 'Running', count: 2 },
            { state: 'Creating', count: 1 },
          ],
        },
        {
          zone: 2,
          instanceCountsByState: [
            { state: 'Running', count: 1 },
            { state: 'Deleting', count: 1 },
          ],
        },
      ],
    },
  }

  it('sums the counts of every zone by state', () => {
    expect(parsePoolRuntimeView(view)).toEqual({ Running: 3, Creating: 1, Deleting: 1 })
    expect(describePoolCounts(parsePoolRuntimeView(view))).toBe('3 running, 1 creating, 1 deleting')
  })

  it('never throws on documents of any shape', () => {
    fc.assert(
      fc.property(fc.jsonValue(), (value) => {
        const counts = parsePoolRuntimeView(value)
        return Object.values(counts).every((count) => typeof count === 'number')
      }),
    )
    expect(describePoolCounts(parsePoolRuntimeView({}))).toBe('no instances reported')
  })

  it('recognises the answers of a claim from an empty pool', () => {
    const answer = (status: number, error: unknown): ArmResponse => ({
      status,
      headers: {},
      body: { error },
      method: 'PUT',
      url: 'x',
    })
    expect(
      isPoolExhausted(answer(400, { code: 'StandbyPoolReservationFailed', message: 'x' })),
    ).toBe(true)
    expect(
      isPoolExhausted(
        answer(400, {
          code: 'StandyPoolReservationFailed',
          message: 'InsufficientContainerGroups',
        }),
      ),
    ).toBe(true)
    expect(
      isPoolExhausted(
        answer(400, { code: 'BadRequest', details: [{ code: 'InsufficientContainerGroups' }] }),
      ),
    ).toBe(true)
    expect(isPoolExhausted(answer(400, { code: 'InvalidRequestContent', message: 'bad' }))).toBe(
      false,
    )
    expect(isPoolExhausted(answer(500, { code: 'InsufficientContainerGroups' }))).toBe(false)
  })
})

describe('group placement', () => {
  const subnet =
    '/subscriptions/s/resourceGroups/rg/providers/Microsoft.Network/virtualNetworks/v/subnets/sandboxes'
  const group = (ipType: string, subnetIds: unknown) => ({
    properties: { ipAddress: { type: ipType, ip: '10.0.0.4' }, subnetIds },
  })

  it('accepts a private group in the configured subnet, comparing ids without case', () => {
    expect(
      placementRefusal('g', group('Private', [{ id: subnet.toUpperCase() }]), subnet),
    ).toBeUndefined()
  })

  it('refuses deny-all for a group with a public address or outside the subnet', () => {
    expect(placementRefusal('g', group('Public', [{ id: subnet }]), subnet)).toMatchObject({
      control: 'egress.deny-all',
    })
    expect(
      placementRefusal('g', group('Private', [{ id: `${subnet}-other` }]), subnet)?.reason,
    ).toContain('not in the configured subnet')
    expect(placementRefusal('g', group('Private', undefined), subnet)).toBeDefined()
  })
})

describe('ArmClient transport failures', () => {
  it('retries a refused connection, then reports it as a transport error naming the URL', async () => {
    const client = new ArmClient({ endpoint: 'http://127.0.0.1:9', getToken: async () => 'token' })
    const transient: string[] = []
    const error = await client
      .send('GET', 'http://127.0.0.1:9/subscriptions/s?api-version=1', {
        maxAttempts: 2,
        onTransient: (failure) => transient.push(failure.code),
      })
      .catch((caught: unknown) => caught)
    await client.close()
    expect(SandboxTransportError.isInstance(error)).toBe(true)
    expect((error as SandboxTransportError).endpoint).toBe('http://127.0.0.1:9/subscriptions/s')
    expect(transient).toEqual(['NetworkError'])
  })
})
