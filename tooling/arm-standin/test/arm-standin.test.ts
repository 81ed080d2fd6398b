import { randomBytes } from 'node:crypto'
import { fileURLToPath } from 'node:url'
import Dockerode from 'dockerode'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import {
  type ArmStandin,
  DEFAULT_SUBNET,
  SECRET_CONFIG_MAP_KEY,
  startArmStandin,
} from '../src/index.js'

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

  describe('the subnet and its network security group', () => {
    const networkApi = '?api-version=2024-05-01'
    const get = async (path: string, query = networkApi): Promise<Response> =>
      call('GET', `${standin.url}${path}${query}`)
    interface RuleDocument {
      name: string
      properties: Record<string, unknown>
    }
    const outbound = (rules: RuleDocument[]) =>
      rules
        .filter((rule) => rule.properties.direction === 'Outbound')
        .map((rule) => `${rule.name} ${rule.properties.priority} ${rule.properties.access}`)

    afterAll(() => standin.network.reset())

    it("serves the pool's subnet, delegated to ACI, naming its security group", async () => {
      const response = await get(standin.ids.subnetId)
      expect(response.status).toBe(200)
      const subnet = (await response.json()) as { id: string; properties: Record<string, unknown> }
      expect(subnet).toMatchObject({
        id: standin.ids.subnetId,
        type: 'Microsoft.Network/virtualNetworks/subnets',
        properties: {
          addressPrefix: '10.40.2.0/24',
          networkSecurityGroup: {
            id: expect.stringMatching(
              /\/providers\/Microsoft\.Network\/networkSecurityGroups\/cordon-sandboxes$/,
            ),
          },
          delegations: [
            expect.objectContaining({
              properties: expect.objectContaining({
                serviceName: 'Microsoft.ContainerInstance/containerGroups',
              }),
            }),
          ],
        },
      })
      // Microsoft.Network has api-versions of its own.
      const wrongVersion = await get(standin.ids.subnetId, api)
      expect(wrongVersion.status).toBe(400)
      expect(await wrongVersion.json()).toMatchObject({
        error: { code: 'NoRegisteredProviderFound' },
      })
      const other = await get(standin.ids.subnetId.replace(/[^/]+$/, 'other'))
      expect(other.status).toBe(404)
    })

    it("serves the security group's own rules and Azure's default rules, in Azure's shape", async () => {
      const subnet = (await (await get(standin.ids.subnetId)).json()) as {
        properties: { networkSecurityGroup: { id: string } }
      }
      const response = await get(subnet.properties.networkSecurityGroup.id)
      expect(response.status).toBe(200)
      const group = (await response.json()) as {
        type: string
        properties: { securityRules: RuleDocument[]; defaultSecurityRules: RuleDocument[] }
      }
      expect(group.type).toBe('Microsoft.Network/networkSecurityGroups')
      expect(outbound(group.properties.securityRules)).toEqual([
        'no-platform-dns 100 Deny',
        'no-platform-imds 110 Deny',
        'no-outbound 120 Deny',
      ])
      expect(outbound(group.properties.defaultSecurityRules)).toEqual([
        'AllowVnetOutBound 65000 Allow',
        'AllowInternetOutBound 65001 Allow',
        'DenyAllOutBound 65500 Deny',
      ])
      expect(group.properties.securityRules[4]!.properties).toEqual({
        provisioningState: 'Succeeded',
        protocol: '*',
        sourcePortRange: '*',
        sourcePortRanges: [],
        destinationPortRange: '*',
        destinationPortRanges: [],
        sourceAddressPrefix: '*',
        sourceAddressPrefixes: [],
        destinationAddressPrefix: '*',
        destinationAddressPrefixes: [],
        access: 'Deny',
        priority: 120,
        direction: 'Outbound',
      })
    })

    it('lets a test take the security group away, make it unreadable, or change its rules', async () => {
      const groupId = standin.network.securityGroupId('cordon-sandboxes')
      standin.network.configure({ securityGroup: undefined, natGateway: 'nat', routeTable: 'udr' })
      const bare = (await (await get(standin.ids.subnetId)).json()) as {
        properties: Record<string, unknown>
      }
      expect(bare.properties.networkSecurityGroup).toBeUndefined()
      expect(bare.properties).toMatchObject({
        natGateway: { id: expect.stringMatching(/\/natGateways\/nat$/) },
        routeTable: { id: expect.stringMatching(/\/routeTables\/udr$/) },
      })
      expect((await get(groupId)).status).toBe(404)

      standin.network.configure({
        securityGroup: DEFAULT_SUBNET.securityGroup,
        securityGroupMissing: true,
      })
      const missing = await get(groupId)
      expect(missing.status).toBe(404)
      expect(await missing.json()).toMatchObject({ error: { code: 'ResourceNotFound' } })

      standin.network.configure({
        securityGroupMissing: false,
        securityGroup: { name: 'cordon-sandboxes', securityRules: [] },
      })
      const defaultsOnly = (await (await get(groupId)).json()) as {
        properties: { securityRules: unknown[] }
      }
      expect(defaultsOnly.properties.securityRules).toEqual([])
    })

    it('injects a 403 on a network read, naming the read action', async () => {
      standin.faults.inject({ kind: 'forbidden' }, { resource: 'subnet' })
      const forbidden = await get(standin.ids.subnetId)
      expect(forbidden.status).toBe(403)
      expect(JSON.stringify(await forbidden.json())).toContain(
        'Microsoft.Network/virtualNetworks/subnets/read',
      )
      expect((await get(standin.ids.subnetId)).status).toBe(200)
    })
  })
})
