import {
  SandboxAbortedError,
  SandboxBackendUnavailableError,
  SandboxCreateTimeoutError,
  SandboxOperationError,
} from '@cordon/core'
import { closeTestArmStandin, type TestArmStandin } from '@cordon/test-support'
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest'
import { ArmAuthorizationError, ArmConflictError, ArmRequestFailure } from '../src/index.js'
import {
  createRequest,
  describeRequest,
  groupsGone,
  requestsSince,
  testBackend,
} from './backend-fixture.js'
import { startTestStandin } from './standin-fixture.js'

/** Creates a sandbox, runs one command in it, destroys it; returns the requests it made. */
async function claimAndRelease(standin: TestArmStandin, backendOverrides = {}): Promise<string[]> {
  const { backend } = testBackend(standin, backendOverrides)
  const mark = standin.requests().length
  try {
    const sandbox = await backend.create(createRequest(standin))
    expect((await sandbox.exec('echo', ['claimed'])).stdout).toBe('claimed\n')
    await sandbox.destroy()
  } finally {
    await backend.close()
  }
  return requestsSince(standin, mark).map(describeRequest)
}

async function rejectionOf(promise: Promise<unknown>): Promise<unknown> {
  return promise.then(
    () => {
      throw new Error('expected a rejection')
    },
    (error: unknown) => error,
  )
}

describe('ARM protocol (Azure-AsyncOperation)', () => {
  let standin: TestArmStandin | undefined
  beforeAll(async () => {
    standin = await startTestStandin({ poolSize: 2 })
  })
  afterEach(() => standin?.faults.clear())
  afterAll(() => closeTestArmStandin(standin))

  it('claims with PUT, follows the operation to Succeeded, reads the address, and deletes through the operation', async () => {
    const requests = await claimAndRelease(standin!)
    // The profile and the subnet's security group are read (at once) before the claim.
    expect(requests.slice(0, 3).sort()).toEqual([
      'GET containerGroupProfiles 200',
      'GET networkSecurityGroups 200',
      'GET subnets 200',
    ])
    expect(requests[3]).toBe('PUT containerGroups 201')
    expect(requests).toContain('GET operations 200')
    expect(requests).toContain('GET containerGroups 200')
    const deletion = requests.indexOf('DELETE containerGroups 202')
    expect(deletion).toBeGreaterThan(0)
    expect(requests.slice(deletion + 1)).toContain('GET operations 200')
    expect(await groupsGone(standin!)).toEqual([])
  })

  it('tags every claimed group with its owner and sandbox', async () => {
    const { backend } = testBackend(standin!)
    const request = createRequest(standin!)
    const sandbox = await backend.create(request)
    try {
      const [name] = standin!.groups()
      const response = await fetch(
        `${standin!.url}/subscriptions/${standin!.ids.subscriptionId}/resourceGroups/${standin!.ids.resourceGroup}/providers/Microsoft.ContainerInstance/containerGroups/${name}?api-version=2025-09-01`,
        { headers: { authorization: `Bearer ${standin!.token}` } },
      )
      const group = (await response.json()) as {
        tags: Record<string, string>
        properties: Record<string, unknown>
      }
      // A group that is not detached has no end time: it belongs to the host that claimed it.
      expect(group.tags).toEqual({
        'cordon.managed': '1',
        'cordon.provider': 'prv_acitest',
        'cordon.sandbox': request.id,
        'cordon.created': expect.stringMatching(/^\d+$/),
      })
      expect(group.properties.isCreatedFromStandbyPool).toBe(true)
      expect(name).toBe(`cordon-${request.id.slice(4)}`)
    } finally {
      await sandbox.destroy()
      await backend.close()
    }
  })

  it('honours Retry-After on 429 and retries until the claim goes through', async () => {
    standin!.faults.inject({ kind: 'throttle', retryAfterSeconds: 1 }, { count: 2, method: 'PUT' })
    const started = Date.now()
    const requests = await claimAndRelease(standin!)
    expect(Date.now() - started).toBeGreaterThanOrEqual(2_000)
    expect(requests.filter((line) => line.startsWith('PUT'))).toEqual([
      'PUT containerGroups 429',
      'PUT containerGroups 429',
      'PUT containerGroups 201',
    ])
  })

  it('retries transient 5xx answers, on the claim and while polling', async () => {
    standin!.faults.inject({ kind: 'server-error', status: 503 }, { count: 1, method: 'PUT' })
    standin!.faults.inject(
      { kind: 'server-error', status: 500 },
      { count: 2, resource: 'operation' },
    )
    const requests = await claimAndRelease(standin!)
    expect(requests).toContain('PUT containerGroups 503')
    expect(requests.filter((line) => line === 'GET operations 500')).toHaveLength(2)
    expect(requests).toContain('PUT containerGroups 201')
  })

  it('retries a throttled delete', async () => {
    standin!.faults.inject(
      { kind: 'throttle', retryAfterSeconds: 0 },
      { count: 2, method: 'DELETE' },
    )
    const requests = await claimAndRelease(standin!)
    expect(requests.filter((line) => line.startsWith('DELETE'))).toEqual([
      'DELETE containerGroups 429',
      'DELETE containerGroups 429',
      'DELETE containerGroups 202',
    ])
    expect(await groupsGone(standin!)).toEqual([])
  })

  it('gives up when throttling outlasts the readiness budget, naming the phase and the last 429', async () => {
    standin!.faults.inject(
      { kind: 'throttle', retryAfterSeconds: 1 },
      { count: 100, method: 'PUT' },
    )
    const { backend } = testBackend(standin!, { readyTimeoutMs: 2_500 })
    const error = await rejectionOf(backend.create(createRequest(standin!)))
    await backend.close()
    expect(SandboxCreateTimeoutError.isInstance(error)).toBe(true)
    expect((error as SandboxCreateTimeoutError).phase).toBe('claim')
    const cause = (error as Error).cause as ArmRequestFailure
    expect(cause).toBeInstanceOf(ArmRequestFailure)
    expect(cause).toMatchObject({ status: 429, code: 'TooManyRequests' })
    expect(cause.requestId).toMatch(/^[0-9a-f-]{36}$/)
    expect(await groupsGone(standin!)).toEqual([])
  })

  it('surfaces 409 as ArmConflictError without retrying it', async () => {
    standin!.faults.inject({ kind: 'conflict' }, { count: 1, method: 'PUT' })
    const { backend } = testBackend(standin!)
    const mark = standin!.requests().length
    const error = await rejectionOf(backend.create(createRequest(standin!)))
    await backend.close()
    expect(ArmConflictError.isInstance(error)).toBe(true)
    expect(SandboxOperationError.isInstance(error)).toBe(true)
    expect(error).toMatchObject({ status: 409, armCode: 'Conflict', operation: 'claim' })
    expect(
      requestsSince(standin!, mark).filter((request) => request.method === 'PUT'),
    ).toHaveLength(1)
    expect(await groupsGone(standin!)).toEqual([])
  })

  it('surfaces 401 and 403 as ArmAuthorizationError', async () => {
    for (const [kind, status] of [
      ['unauthorized', 401],
      ['forbidden', 403],
    ] as const) {
      standin!.faults.inject({ kind }, { count: 1, method: 'PUT' })
      const { backend } = testBackend(standin!)
      const error = await rejectionOf(backend.create(createRequest(standin!)))
      await backend.close()
      expect(ArmAuthorizationError.isInstance(error), kind).toBe(true)
      expect(SandboxBackendUnavailableError.isInstance(error)).toBe(true)
      expect(error).toMatchObject({ status, backend: 'container:aci-standby-pool' })
      expect((error as Error).cause).toBeInstanceOf(ArmRequestFailure)
    }
    // A wrong token is refused by the stand-in itself, before any fault.
    const { backend } = testBackend(standin!, { getArmToken: async () => 'not-the-token' })
    const error = await rejectionOf(backend.create(createRequest(standin!)))
    await backend.close()
    expect(error).toMatchObject({ status: 401, armCode: 'InvalidAuthenticationToken' })
  })

  it('reports a failing getArmToken as unavailable, keeping its error as cause', async () => {
    const broken = new Error('no credential available')
    const { backend } = testBackend(standin!, { getArmToken: () => Promise.reject(broken) })
    const error = await rejectionOf(backend.create(createRequest(standin!)))
    await backend.close()
    expect(SandboxBackendUnavailableError.isInstance(error)).toBe(true)
    expect((error as Error).cause).toBe(broken)
  })

  it('deletes a group whose provisioning failed', async () => {
    standin!.faults.inject({ kind: 'provisioning-failure' })
    const { backend } = testBackend(standin!)
    const mark = standin!.requests().length
    const error = await rejectionOf(backend.create(createRequest(standin!)))
    await backend.close()
    expect(SandboxOperationError.isInstance(error)).toBe(true)
    expect((error as Error).message).toContain('ContainerGroupProvisioningFailed')
    expect(requestsSince(standin!, mark).map(describeRequest)).toContain(
      'DELETE containerGroups 202',
    )
    expect(await groupsGone(standin!)).toEqual([])
  })

  it('deletes a group whose provisioning outlasts the budget', async () => {
    standin!.faults.slowProvisioning(5_000)
    const { backend } = testBackend(standin!, { readyTimeoutMs: 1_500 })
    const error = await rejectionOf(backend.create(createRequest(standin!)))
    await backend.close()
    expect(SandboxCreateTimeoutError.isInstance(error)).toBe(true)
    expect((error as SandboxCreateTimeoutError).phase).toBe('claim.provisioning')
    expect(await groupsGone(standin!)).toEqual([])
  })

  it('honours an abort during the claim and deletes what it claimed', async () => {
    standin!.faults.slowProvisioning(3_000)
    const { backend } = testBackend(standin!)
    const controller = new AbortController()
    setTimeout(() => controller.abort(new Error('host shutting down')), 300)
    const error = await rejectionOf(
      backend.create(createRequest(standin!, { signal: controller.signal })),
    )
    await backend.close()
    expect(SandboxAbortedError.isInstance(error)).toBe(true)
    expect(await groupsGone(standin!)).toEqual([])
  })

  it('waits for an empty pool to refill, reading its runtime view', async () => {
    standin!.faults.inject({ kind: 'pool-empty' }, { count: 2 })
    const requests = await claimAndRelease(standin!)
    expect(requests.filter((line) => line.startsWith('PUT'))).toEqual([
      'PUT containerGroups 400',
      'PUT containerGroups 400',
      'PUT containerGroups 201',
    ])
    expect(requests).toContain('GET runtimeViews 200')
  })

  it('serves more claims at once than the pool holds, waiting for it to refill', async () => {
    const { backend } = testBackend(standin!)
    const sandboxes = await Promise.all(
      [1, 2, 3].map(() => backend.create(createRequest(standin!))),
    )
    try {
      const outputs = await Promise.all(
        sandboxes.map((sandbox) => sandbox.exec('cat', ['/proc/sys/kernel/hostname'])),
      )
      expect(new Set(outputs.map((result) => result.stdout)).size).toBe(3)
    } finally {
      await Promise.all(sandboxes.map((sandbox) => sandbox.destroy()))
      await backend.close()
    }
    expect(await groupsGone(standin!)).toEqual([])
  })

  it('times out on a pool that stays empty, saying what the pool reported', async () => {
    standin!.faults.inject({ kind: 'pool-empty' }, { count: 100 })
    const { backend } = testBackend(standin!, { readyTimeoutMs: 2_000 })
    const error = await rejectionOf(backend.create(createRequest(standin!)))
    await backend.close()
    expect(SandboxCreateTimeoutError.isInstance(error)).toBe(true)
    const cause = (error as Error).cause
    expect(SandboxBackendUnavailableError.isInstance(cause)).toBe(true)
    expect((cause as Error).message).toMatch(
      /no ready container group to claim \(\d+ running, \d+ creating\)/,
    )
  })

  it('treats a group that is already gone as destroyed', async () => {
    const { backend } = testBackend(standin!)
    const sandbox = await backend.create(createRequest(standin!))
    const [name] = standin!.groups()
    const url = `${standin!.url}/subscriptions/${standin!.ids.subscriptionId}/resourceGroups/${standin!.ids.resourceGroup}/providers/Microsoft.ContainerInstance/containerGroups/${name}?api-version=2025-09-01`
    const headers = { authorization: `Bearer ${standin!.token}` }
    expect((await fetch(url, { method: 'DELETE', headers })).status).toBe(202)
    await groupsGone(standin!)
    expect((await fetch(url, { method: 'DELETE', headers })).status).toBe(404)
    const mark = standin!.requests().length
    await sandbox.destroy()
    await sandbox.destroy()
    await backend.close()
    expect(requestsSince(standin!, mark).map(describeRequest)).toEqual([
      'DELETE containerGroups 404',
    ])
    expect(sandbox.status).toBe('destroyed')
  })

  it('sends the configured api-version, and an unsupported one is an operation error, not retried', async () => {
    const { backend } = testBackend(standin!, { armApiVersion: '2019-12-01' })
    const mark = standin!.requests().length
    const error = await rejectionOf(backend.create(createRequest(standin!)))
    await backend.close()
    expect(SandboxOperationError.isInstance(error)).toBe(true)
    expect((error as Error).cause).toMatchObject({ status: 400, code: 'NoRegisteredProviderFound' })
    // Microsoft.Network has api-versions of its own, so only the profile's read is refused, once.
    expect(requestsSince(standin!, mark).map(describeRequest).sort()).toEqual([
      'GET containerGroupProfiles 400',
      'GET networkSecurityGroups 200',
      'GET subnets 200',
    ])
  })
})

describe('ARM protocol (Location)', () => {
  let standin: TestArmStandin | undefined
  beforeAll(async () => {
    standin = await startTestStandin({ poolSize: 1, lroStyle: 'location', retryAfterSeconds: 1 })
  })
  afterAll(() => closeTestArmStandin(standin))

  it('follows a 202 with Location, waiting Retry-After between polls', async () => {
    const started = Date.now()
    const requests = await claimAndRelease(standin!)
    expect(requests.find((line) => line.startsWith('PUT'))).toBe('PUT containerGroups 202')
    const polls = requests.filter((line) => line.startsWith('GET operationResults'))
    expect(polls).toContain('GET operationResults 200')
    // At least one wait of Retry-After: 1 before the first poll of the claim.
    expect(Date.now() - started).toBeGreaterThanOrEqual(1_000)
  })
})
