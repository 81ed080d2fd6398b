import { README_SECURITY_RULES } from '@cordon/arm-standin'
import { SandboxControlRefusedError, SandboxCreateTimeoutError } from '@cordon/core'
import { closeTestArmStandin, type TestArmStandin } from '@cordon/test-support'
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest'
import { ArmAuthorizationError, type ArmRequestFailure } from '../src/index.js'
import {
  createRequest,
  describeRequest,
  groupsGone,
  requestsSince,
  testBackend,
} from './backend-fixture.js'
import { startTestStandin, testProvider } from './standin-fixture.js'

async function rejectionOf(promise: Promise<unknown>): Promise<unknown> {
  return promise.then(
    () => {
      throw new Error('expected a rejection')
    },
    (error: unknown) => error,
  )
}

function expectDenyAllRefused(error: unknown): SandboxControlRefusedError {
  expect(SandboxControlRefusedError.isInstance(error), String(error)).toBe(true)
  expect(error).toMatchObject({
    code: 'CONTROL_REFUSED',
    control: 'egress.deny-all',
    backend: 'container:aci-standby-pool',
  })
  return error as SandboxControlRefusedError
}

/**
 * `deny-all` is the subnet's network security group's to enforce: the
 * backend reads the subnet and its group over ARM and refuses deny-all when
 * the group lets traffic reach the internet, or cannot be read.
 */
describe('deny-all is checked against the subnet and its network security group', () => {
  let standin: TestArmStandin | undefined
  beforeAll(async () => {
    standin = await startTestStandin({ poolSize: 2 })
  })
  afterEach(() => {
    standin?.faults.clear()
    standin?.network.reset()
  })
  afterAll(() => closeTestArmStandin(standin))

  /** Creates through a fresh backend; returns the error (or undefined) and the requests made. */
  async function tryCreate(): Promise<{ error: unknown; requests: string[] }> {
    const { backend } = testBackend(standin!)
    const mark = standin!.requests().length
    let error: unknown
    try {
      const sandbox = await backend.create(createRequest(standin!))
      await sandbox.destroy()
    } catch (caught) {
      error = caught
    } finally {
      await backend.close()
    }
    return { error, requests: requestsSince(standin!, mark).map(describeRequest) }
  }

  it('creates when the security group denies everything out (the README setup)', async () => {
    const { error, requests } = await tryCreate()
    expect(error).toBeUndefined()
    const put = requests.indexOf('PUT containerGroups 201')
    expect(requests.slice(0, put)).toEqual(
      expect.arrayContaining(['GET subnets 200', 'GET networkSecurityGroups 200']),
    )
    expect(await groupsGone(standin!)).toEqual([])
  })

  it('refuses a subnet without a security group, claiming nothing', async () => {
    standin!.network.configure({ securityGroup: undefined })
    const { error, requests } = await tryCreate()
    const refusal = expectDenyAllRefused(error)
    expect(refusal.reason).toContain(
      `subnet ${standin!.ids.subnetId} has no network security group`,
    )
    expect(requests).toContain('GET subnets 200')
    expect(requests.filter((line) => line.includes('networkSecurityGroups'))).toEqual([])
    expect(requests.filter((line) => line.startsWith('PUT'))).toEqual([])
  })

  it('refuses when an Allow to the internet comes before the Deny, naming the rule and the group', async () => {
    standin!.network.configure({
      securityGroup: {
        name: 'cordon-sandboxes',
        securityRules: [
          ...README_SECURITY_RULES,
          {
            name: 'to-pypi',
            direction: 'Outbound',
            access: 'Allow',
            priority: 90,
            protocol: 'Tcp',
            sourceAddressPrefix: '*',
            sourcePortRange: '*',
            destinationAddressPrefix: '151.101.0.0/16',
            destinationPortRange: '443',
          },
        ],
      },
    })
    const { error, requests } = await tryCreate()
    const refusal = expectDenyAllRefused(error)
    expect(refusal.reason).toContain(standin!.ids.subnetId)
    expect(refusal.reason).toContain(standin!.network.securityGroupId('cordon-sandboxes'))
    expect(refusal.reason).toContain("rule 'to-pypi' (priority 90, Allow Tcp to 151.101.0.0/16")
    expect(refusal.reason).toContain('at a priority number below 90')
    expect(requests.filter((line) => line.startsWith('PUT'))).toEqual([])
  })

  it("refuses a security group with Azure's default rules only, naming AllowInternetOutBound", async () => {
    standin!.network.configure({ securityGroup: { name: 'defaults-only', securityRules: [] } })
    const refusal = expectDenyAllRefused((await tryCreate()).error)
    expect(refusal.reason).toContain(standin!.network.securityGroupId('defaults-only'))
    expect(refusal.reason).toContain("Azure's default rule 'AllowInternetOutBound' (priority 65001")
  })

  it('refuses, naming what it could not read, when the subnet or its group cannot be read', async () => {
    standin!.faults.inject({ kind: 'forbidden' }, { resource: 'subnet' })
    const forbidden = expectDenyAllRefused((await tryCreate()).error)
    expect(forbidden.reason).toContain(
      `could not read the subnet ${standin!.ids.subnetId} (HTTP 403)`,
    )
    expect(forbidden.reason).toContain('Microsoft.Network/virtualNetworks/subnets/read')
    expect(ArmAuthorizationError.isInstance(forbidden.cause)).toBe(true)

    standin!.network.configure({ securityGroupMissing: true })
    const { error, requests } = await tryCreate()
    const missing = expectDenyAllRefused(error)
    expect(missing.reason).toContain(
      `could not read the network security group ${standin!.network.securityGroupId('cordon-sandboxes')}`,
    )
    expect(missing.reason).toContain('(HTTP 404)')
    expect(((missing.cause as Error).cause as ArmRequestFailure).code).toBe('ResourceNotFound')
    expect(requests.filter((line) => line.startsWith('PUT'))).toEqual([])
  })

  it('retries a transient failure of the read, and names the phase when reading outlasts the budget', async () => {
    standin!.faults.inject(
      { kind: 'server-error', status: 503 },
      { count: 1, resource: 'networkSecurityGroup' },
    )
    const { error, requests } = await tryCreate()
    expect(error).toBeUndefined()
    expect(requests).toEqual(
      expect.arrayContaining(['GET networkSecurityGroups 503', 'GET networkSecurityGroups 200']),
    )
    expect(await groupsGone(standin!)).toEqual([])

    standin!.faults.inject(
      { kind: 'throttle', retryAfterSeconds: 1 },
      { count: 100, resource: 'subnet' },
    )
    const { backend } = testBackend(standin!, { readyTimeoutMs: 1_500 })
    const slow = await rejectionOf(backend.create(createRequest(standin!)))
    await backend.close()
    expect(SandboxCreateTimeoutError.isInstance(slow), String(slow)).toBe(true)
    expect((slow as SandboxCreateTimeoutError).phase).toBe('egress.subnet')
  })

  it('reads the subnet and its group once for many creates, at once and after', async () => {
    const { backend } = testBackend(standin!)
    const mark = standin!.requests().length
    try {
      const first = await Promise.all([1, 2, 3].map(() => backend.create(createRequest(standin!))))
      await Promise.all(first.map((sandbox) => sandbox.destroy()))
      const later = await backend.create(createRequest(standin!))
      await later.destroy()
    } finally {
      await backend.close()
    }
    const reads = requestsSince(standin!, mark)
      .map(describeRequest)
      .filter((line) => /subnets|networkSecurityGroups/.test(line))
    expect(reads).toEqual(['GET subnets 200', 'GET networkSecurityGroups 200'])
    expect(await groupsGone(standin!)).toEqual([])
  })

  it('keeps a refusal for the same while: a fixed group is seen on the next read, not mid-TTL', async () => {
    standin!.network.configure({ securityGroup: undefined })
    const { backend } = testBackend(standin!)
    const mark = standin!.requests().length
    try {
      expectDenyAllRefused(await rejectionOf(backend.create(createRequest(standin!))))
      standin!.network.reset()
      expectDenyAllRefused(await rejectionOf(backend.create(createRequest(standin!))))
    } finally {
      await backend.close()
    }
    expect(
      requestsSince(standin!, mark)
        .map(describeRequest)
        .filter((line) => line.startsWith('GET subnets')),
    ).toEqual(['GET subnets 200'])
  })

  it('refuses through a provider too', async () => {
    standin!.network.configure({ securityGroup: undefined })
    const provider = testProvider(standin!)
    try {
      expectDenyAllRefused(await rejectionOf(provider.create()))
    } finally {
      await provider.close()
    }
  })
})
