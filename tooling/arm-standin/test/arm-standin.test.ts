import { randomBytes } from 'node:crypto'
import { fileURLToPath } from 'node:url'
import Dockerode from 'dockerode'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { type ArmStandin, SECRET_CONFIG_MAP_KEY, startArmStandin } from '../src/index.js'

const docker = new Dockerode()
const token = randomBytes(24).toString('base64url')
const labels = { 'cordon-test.run': process.env.CORDON_TEST_RUN_ID ?? `local-${process.pid}` }
const entrypointPath = fileURLToPath(
  new URL('../../../packages/backend-aci/cordon-aci-entrypoint.sh', import.meta.url),
)

describe('ARM stand-in', () => {
  let standin: ArmStandin
  const api = '?api-version=2025-09-01'
  const groupUrl = (name: string, query = api): string =>
    `${standin.url}/subscriptions/${standin.ids.subscriptionId}/resourceGroups/${standin.ids.resourceGroup}/providers/Microsoft.ContainerInstance/containerGroups/${name}${query}`
  const call = (method: string, url: string, body?: unknown, bearer = token): Promise<Response> =>
    fetch(url, {
      method,
      headers: { authorization: `Bearer ${bearer}`, 'content-type': 'application/json' },
      ...(body === undefined ? {} : { body: JSON.stringify(body) }),
    })
  const claimBody = (overrides: Record<string, unknown> = {}) => ({
    location: standin.ids.location,
    properties: {
      containerGroupProfile: { id: standin.ids.containerGroupProfileResourceId, revision: 1 },
      standbyPoolProfile: {
        id: standin.ids.standbyPoolResourceId,
        failContainerGroupCreateOnReuseFailure: true,
      },
      containers: [
        {
          name: 'sandbox',
          properties: { configMap: { keyValuePairs: { [SECRET_CONFIG_MAP_KEY]: 's'.repeat(43) } } },
        },
      ],
      subnetIds: [{ id: standin.ids.subnetId }],
      ...overrides,
    },
  })
  const settle = async (operationUrl: string): Promise<{ status: string }> => {
    for (;;) {
      const status = (await (await call('GET', operationUrl)).json()) as { status: string }
      if (status.status !== 'InProgress') return status
      await new Promise((resolve) => setTimeout(resolve, 50))
    }
  }

  beforeAll(async () => {
    standin = await startArmStandin({
      token,
      entrypointPath,
      labels,
      poolSize: 1,
      retryAfterSeconds: 0,
    })
    await standin.poolSettled()
  })
  afterAll(async () => {
    const id = standin?.id
    await standin?.close()
    if (id) {
      const left = await docker.listContainers({
        all: true,
        filters: { label: [`cordon.standin=${id}`] },
      })
      const networks = await docker.listNetworks({ filters: { label: [`cordon.standin=${id}`] } })
      expect([...left, ...networks]).toEqual([])
    }
  })

  it('checks the bearer token and the api-version on every request', async () => {
    expect((await call('GET', groupUrl('x'), undefined, 'wrong')).status).toBe(401)
    const missing = await call('GET', groupUrl('x', ''))
    expect(missing.status).toBe(400)
    expect(await missing.json()).toMatchObject({ error: { code: 'MissingApiVersionParameter' } })
    const unknown = await call('GET', groupUrl('x', '?api-version=2017-01-01'))
    expect(await unknown.json()).toMatchObject({ error: { code: 'NoRegisteredProviderFound' } })
    expect((await call('GET', groupUrl('x'))).headers.get('x-ms-request-id')).toMatch(
      /^[0-9a-f-]{36}$/,
    )
  })

  it('claims asynchronously, reports the operation, then deletes with 202 and 404 after', async () => {
    const put = await call('PUT', groupUrl('claim-one'), claimBody())
    expect(put.status).toBe(201)
    expect(
      ((await put.json()) as { properties: { provisioningState: string } }).properties
        .provisioningState,
    ).toBe('Pending')
    expect(await settle(put.headers.get('azure-asyncoperation')!)).toMatchObject({
      status: 'Succeeded',
    })
    const group = (await (await call('GET', groupUrl('claim-one'))).json()) as {
      properties: {
        provisioningState: string
        ipAddress: { ip?: string }
        isCreatedFromStandbyPool: boolean
      }
    }
    expect(group.properties).toMatchObject({
      provisioningState: 'Succeeded',
      isCreatedFromStandbyPool: true,
    })
    expect(group.properties.ipAddress.ip).toMatch(/^\d+\.\d+\.\d+\.\d+$/)
    expect((await call('PUT', groupUrl('claim-one'), claimBody())).status).toBe(409)
    const deletion = await call('DELETE', groupUrl('claim-one'))
    expect(deletion.status).toBe(202)
    expect(await settle(deletion.headers.get('azure-asyncoperation')!)).toMatchObject({
      status: 'Succeeded',
    })
    expect((await call('DELETE', groupUrl('claim-one'))).status).toBe(404)
  })

  it('refuses overrides a claim cannot make, and reports an empty pool', async () => {
    const override = await call(
      'PUT',
      groupUrl('claim-two'),
      claimBody({ containers: [{ name: 'sandbox', properties: { environmentVariables: [] } }] }),
    )
    expect(override.status).toBe(400)
    standin.faults.inject({ kind: 'pool-empty' })
    const empty = await call('PUT', groupUrl('claim-two'), claimBody())
    expect(empty.status).toBe(400)
    expect(JSON.stringify(await empty.json())).toContain('InsufficientContainerGroups')
    const view = (await (
      await call(
        'GET',
        `${standin.url}${standin.ids.standbyPoolResourceId}/runtimeViews/latest?api-version=2025-10-01`,
      )
    ).json()) as {
      properties: { instanceCountSummary: Array<{ instanceCountsByState: unknown[] }> }
    }
    expect(view.properties.instanceCountSummary[0]!.instanceCountsByState).toContainEqual(
      expect.objectContaining({ state: 'Running' }),
    )
    expect(standin.groups()).toEqual([])
  })

  it('injects throttling with Retry-After', async () => {
    standin.faults.inject({ kind: 'throttle', retryAfterSeconds: 3 }, { method: 'GET' })
    const throttled = await call('GET', groupUrl('anything'))
    expect(throttled.status).toBe(429)
    expect(throttled.headers.get('retry-after')).toBe('3')
    expect((await call('GET', groupUrl('anything'))).status).toBe(404)
  })
})
