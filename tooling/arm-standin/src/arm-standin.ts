import { randomBytes, timingSafeEqual } from 'node:crypto'
import { mkdtemp, rm } from 'node:fs/promises'
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { agentProgramPath } from '@cordon/agent'
import Dockerode from 'dockerode'
import { ArmHttpError, readJsonBody, sendError, sendJson } from './arm-http.js'
import { type ArmRoute, parseArmPath, providerOf, requestKindOf } from './arm-routes.js'
import { type ArmAnswer, ContainerGroups, type StandinResourceIds } from './container-groups.js'
import { FaultPlan } from './fault-plan.js'
import { startSandboxContainer } from './sandbox-container.js'
import { StandbyPool } from './standby-pool.js'
import { DEFAULT_SUBNET, StandinNetwork, type StandinSubnetSpec } from './standin-network.js'
import { DEFAULT_PROFILE, profileDocument, type StandinProfileSpec } from './standin-profile.js'
import { isolateFromHost } from './subnet-isolation.js'

/** api-versions each resource provider accepts, as ARM checks them. */
export const SUPPORTED_API_VERSIONS = {
  'Microsoft.ContainerInstance': ['2024-05-01-preview', '2024-10-01-preview', '2025-09-01'],
  'Microsoft.StandbyPool': ['2025-03-01', '2025-10-01'],
  'Microsoft.Network': ['2023-09-01', '2023-11-01', '2024-01-01', '2024-03-01', '2024-05-01'],
} as const

export interface ArmStandinOptions {
  /** The bearer token callers must present. */
  readonly token: string
  /** `cordon-aci-entrypoint.sh` from `@cordon/backend-aci`, mounted where the profile's command expects it. */
  readonly entrypointPath: string
  /** The bundled agent (default: `@cordon/agent`'s `dist/cordon-agent.mjs`). */
  readonly agentProgramPath?: string
  readonly docker?: Dockerode
  /** Labels on every container and network the stand-in makes (e.g. a test run id). */
  readonly labels?: Readonly<Record<string, string>>
  /** `maxReadyCapacity` of the standby pool (default 2). */
  readonly poolSize?: number
  readonly profile?: Partial<StandinProfileSpec>
  /**
   * The pool's subnet (default {@link DEFAULT_SUBNET}: a security group with
   * the rules the backend-aci README asks for, which deny all outbound traffic).
   */
  readonly subnet?: Partial<StandinSubnetSpec>
  /** `Retry-After` on long-running-operation answers, in seconds (default 1, as ARM tends to send). */
  readonly retryAfterSeconds?: number
  /** How a claim points at its operation (default `azure-async-operation`). */
  readonly lroStyle?: 'azure-async-operation' | 'location'
  readonly subscriptionId?: string
  readonly resourceGroup?: string
  readonly location?: string
  readonly host?: string
  readonly port?: number
}

/** The fields of `@cordon/backend-aci`'s config that name the stand-in's resources. */
export interface StandinBackendConfig extends StandinResourceIds {
  readonly tier: 'container'
  readonly runtime: 'aci-standby-pool'
  readonly armEndpoint: string
  readonly workerPort: number
}

export interface RecordedArmRequest {
  readonly method: string
  readonly path: string
  readonly status: number
}

export interface ArmStandin {
  /** Base URL to use as the backend's `armEndpoint`. */
  readonly url: string
  /** Every container and network of this stand-in carries `cordon.standin=<id>`. */
  readonly id: string
  readonly ids: StandinResourceIds
  readonly profile: StandinProfileSpec
  /** The pool's subnet and its security group, as `Microsoft.Network` serves them; reconfigurable. */
  readonly network: StandinNetwork
  /** Faults to inject into the next requests or claims. */
  readonly faults: FaultPlan
  /** The `aci-standby-pool` backend config that points at this stand-in, but for `getArmToken`. */
  backendConfig(): StandinBackendConfig
  /** Every request served so far, in order. */
  requests(): readonly RecordedArmRequest[]
  /** Names of the container groups that exist now. */
  groups(): string[]
  /** Running and creating instances of the standby pool. */
  poolCounts(): { running: number; creating: number }
  /** Resolves when the pool has started every instance it is starting. */
  poolSettled(): Promise<void>
  /** Deletes every group and pooled container, the network, then stops serving. */
  close(): Promise<void>
}

/**
 * A local stand-in for the parts of Azure Resource Manager that claiming
 * from an ACI standby pool touches, for tests and local development. Each
 * container group is a real container on the local engine running the real
 * entrypoint and agent, reachable from the host on an `--internal` network
 * that plays the pool's subnet.
 */
export async function startArmStandin(options: ArmStandinOptions): Promise<ArmStandin> {
  const docker = options.docker ?? new Dockerode()
  const profile: StandinProfileSpec = { ...DEFAULT_PROFILE, ...options.profile }
  await docker.ping().catch((error: unknown) => {
    throw new Error(
      `the ARM stand-in needs a Docker Engine (run tooling/engine/setup.sh): ${(error as Error).message}`,
      {
        cause: error,
      },
    )
  })
  await docker
    .getImage(profile.image)
    .inspect()
    .catch((error: unknown) => {
      throw new Error(
        `image ${profile.image} is missing (tooling/engine/setup.sh builds cordon-test/node)`,
        { cause: error },
      )
    })

  const standinId = `arm-standin-${randomBytes(6).toString('hex')}`
  const labels = { ...options.labels, 'cordon.managed': '1', 'cordon.standin': standinId }
  const network = await docker.createNetwork({
    Name: standinId,
    Internal: true,
    CheckDuplicate: true,
    Labels: labels,
  })
  const reopenToHost = await isolateFromHost(network.id).catch(async (error: unknown) => {
    await network.remove().catch(() => {})
    throw error
  })
  const stateDir = await mkdtemp(join(tmpdir(), 'cordon-arm-standin-'))
  const subscriptionId = options.subscriptionId ?? '00000000-0000-4000-8000-000000000000'
  const resourceGroup = options.resourceGroup ?? 'cordon-standin'
  const location = options.location ?? 'westeurope'
  const rg = `/subscriptions/${subscriptionId}/resourceGroups/${resourceGroup}`
  const ids: StandinResourceIds = {
    subscriptionId,
    resourceGroup,
    location,
    standbyPoolResourceId: `${rg}/providers/Microsoft.StandbyPool/standbyContainerGroupPools/cordon-pool`,
    containerGroupProfileResourceId: `${rg}/providers/Microsoft.ContainerInstance/containerGroupProfiles/${profile.name}`,
    subnetId: `${rg}/providers/Microsoft.Network/virtualNetworks/cordon-vnet/subnets/${standinId}`,
  }
  const subnet = new StandinNetwork(
    { subnetId: ids.subnetId, resourceGroupId: rg, location },
    { ...DEFAULT_SUBNET, ...options.subnet },
  )
  let counter = 0
  const startContainer = () => {
    const name = `${standinId}-${++counter}`
    return startSandboxContainer(docker, {
      name,
      profile,
      networkName: standinId,
      configMapDir: join(stateDir, name),
      agentProgramPath: options.agentProgramPath ?? agentProgramPath(),
      entrypointPath: options.entrypointPath,
      labels,
    })
  }
  const pool = new StandbyPool({
    size: options.poolSize ?? 2,
    start: startContainer,
    onError: (error) =>
      process.stderr.write(
        `arm-standin: a pool instance failed to start: ${(error as Error).message}\n`,
      ),
  })
  const faults = new FaultPlan()
  let baseUrl = ''
  const groups = new ContainerGroups({
    ids,
    profile,
    pool,
    startCold: startContainer,
    faults,
    retryAfterSeconds: options.retryAfterSeconds ?? 1,
    lroStyle: options.lroStyle ?? 'azure-async-operation',
    baseUrl: () => baseUrl,
  })
  const recorded: RecordedArmRequest[] = []
  const expected = Buffer.from(`Bearer ${options.token}`)

  const serve = async (req: IncomingMessage, url: URL): Promise<ArmAnswer> => {
    const method = req.method ?? 'GET'
    const route = parseArmPath(url.pathname, ids)
    if (!route)
      throw new ArmHttpError(
        404,
        'InvalidResourceType',
        `The resource at '${url.pathname}' is not served here.`,
      )
    const given = Buffer.from(req.headers.authorization ?? '')
    if (given.byteLength !== expected.byteLength || !timingSafeEqual(given, expected)) {
      throw new ArmHttpError(
        401,
        'InvalidAuthenticationToken',
        'The access token is missing or invalid.',
        {
          'www-authenticate':
            'Bearer authorization_uri="https://login.microsoftonline.com/common", error="invalid_token"',
        },
      )
    }
    const apiVersion = checkApiVersion(url, route)
    const fault = faults.take(
      ['throttle', 'server-error', 'conflict', 'unauthorized', 'forbidden'],
      {
        method,
        resource: requestKindOf(route),
      },
    )
    if (fault) throw faultError(fault, route)
    switch (route.kind) {
      case 'containerGroup':
        if (method === 'PUT') return groups.claim(route.name, await readJsonBody(req), apiVersion)
        if (method === 'GET') return groups.get(route.name)
        if (method === 'DELETE') return groups.delete(route.name, apiVersion)
        break
      case 'containerGroups':
        if (method === 'GET') return groups.list()
        break
      case 'profile':
        if (method !== 'GET') break
        if (
          route.name.toLowerCase() !== profile.name.toLowerCase() ||
          (route.revision !== undefined && route.revision !== profile.revision)
        ) {
          throw new ArmHttpError(
            404,
            'ResourceNotFound',
            `The container group profile '${route.name}' was not found.`,
          )
        }
        return {
          status: 200,
          body: profileDocument(profile, {
            profileId: ids.containerGroupProfileResourceId,
            location,
          }),
        }
      case 'operation':
        if (method === 'GET') return groups.operation(route.id, route.style, apiVersion)
        break
      case 'runtimeView': {
        if (method !== 'GET') break
        if (!ids.standbyPoolResourceId.toLowerCase().endsWith(`/${route.pool.toLowerCase()}`)) {
          throw new ArmHttpError(
            404,
            'ResourceNotFound',
            `The standby pool '${route.pool}' was not found.`,
          )
        }
        const counts = pool.counts()
        return {
          status: 200,
          body: {
            id: `${ids.standbyPoolResourceId}/runtimeViews/latest`,
            name: 'latest',
            type: 'Microsoft.StandbyPool/standbyContainerGroupPools/runtimeViews',
            properties: {
              instanceCountSummary: [
                {
                  instanceCountsByState: [
                    { state: 'Running', count: counts.running },
                    { state: 'Creating', count: counts.creating },
                  ],
                },
              ],
              provisioningState: 'Succeeded',
            },
          },
        }
      }
      case 'subnet':
        if (method !== 'GET') break
        if (
          `${rg}/providers/Microsoft.Network/virtualNetworks/${route.virtualNetwork}/subnets/${route.name}`.toLowerCase() !==
          ids.subnetId.toLowerCase()
        ) {
          throw new ArmHttpError(404, 'NotFound', `Resource ${url.pathname} not found.`)
        }
        return { status: 200, body: subnet.subnetDocument() }
      case 'networkSecurityGroup': {
        if (method !== 'GET') break
        const document = subnet.securityGroupDocument(route.name)
        if (!document) {
          throw new ArmHttpError(
            404,
            'ResourceNotFound',
            `The Resource 'Microsoft.Network/networkSecurityGroups/${route.name}' under resource group '${resourceGroup}' was not found.`,
          )
        }
        return { status: 200, body: document }
      }
    }
    throw new ArmHttpError(
      405,
      'MethodNotAllowed',
      `${method} is not supported on ${url.pathname}.`,
    )
  }

  const server: Server = createServer((req: IncomingMessage, res: ServerResponse) => {
    const url = new URL(req.url ?? '/', 'http://standin')
    res.on('finish', () =>
      recorded.push({ method: req.method ?? '', path: url.pathname, status: res.statusCode }),
    )
    serve(req, url).then(
      (answer) => sendJson(res, answer.status, answer.body, answer.headers),
      (error: unknown) => {
        if (res.headersSent || res.destroyed) return
        sendError(
          res,
          error instanceof ArmHttpError
            ? error
            : new ArmHttpError(
                500,
                'InternalServerError',
                (error as Error)?.message ?? String(error),
              ),
        )
      },
    )
  })
  const host = options.host ?? '127.0.0.1'
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject)
    server.listen(options.port ?? 0, host, () => {
      server.off('error', reject)
      resolve()
    })
  })
  const address = server.address()
  baseUrl = `http://${host}:${typeof address === 'object' && address ? address.port : 0}`
  pool.fill()

  return {
    url: baseUrl,
    id: standinId,
    ids,
    profile,
    network: subnet,
    faults,
    backendConfig: () => ({
      tier: 'container',
      runtime: 'aci-standby-pool',
      armEndpoint: baseUrl,
      ...ids,
      workerPort: profile.agentPort,
    }),
    requests: () => recorded,
    groups: () => groups.names(),
    poolCounts: () => pool.counts(),
    poolSettled: () => pool.settled(),
    async close() {
      await new Promise<void>((resolve) => {
        server.close(() => resolve())
        server.closeAllConnections()
      })
      await groups.close()
      await pool.close()
      // Anything a crash between start and record left behind carries the stand-in's label.
      const leftovers = await docker.listContainers({
        all: true,
        filters: { label: [`cordon.standin=${standinId}`] },
      })
      await Promise.allSettled(
        leftovers.map((info) => docker.getContainer(info.Id).remove({ force: true, v: true })),
      )
      await reopenToHost()
      await network.remove().catch((error: { statusCode?: number }) => {
        if (error?.statusCode !== 404) throw error
      })
      await rm(stateDir, { recursive: true, force: true })
    },
  }
}

function checkApiVersion(url: URL, route: ArmRoute): string {
  const apiVersion = url.searchParams.get('api-version')
  if (!apiVersion) {
    throw new ArmHttpError(
      400,
      'MissingApiVersionParameter',
      'The api-version query parameter (?api-version=) is required for all requests.',
    )
  }
  const provider = providerOf(route)
  const supported: readonly string[] = SUPPORTED_API_VERSIONS[provider]
  if (!supported.includes(apiVersion)) {
    throw new ArmHttpError(
      400,
      'NoRegisteredProviderFound',
      `No registered resource provider found for location and API version '${apiVersion}'. The supported api-versions of ${provider} are '${supported.join(', ')}'.`,
    )
  }
  return apiVersion
}

function faultError(
  fault: NonNullable<ReturnType<FaultPlan['take']>>,
  route: ArmRoute,
): ArmHttpError {
  switch (fault.kind) {
    case 'throttle':
      return new ArmHttpError(429, 'TooManyRequests', 'The request is being throttled.', {
        'retry-after': String(fault.retryAfterSeconds ?? 1),
        'x-ms-ratelimit-remaining-subscription-writes': '0',
      })
    case 'server-error': {
      const status = fault.status ?? 503
      return new ArmHttpError(
        status,
        status === 503 ? 'ServiceUnavailable' : 'InternalServerError',
        'A transient error occurred (injected).',
        {
          ...(fault.retryAfterSeconds === undefined
            ? {}
            : { 'retry-after': String(fault.retryAfterSeconds) }),
        },
      )
    }
    case 'conflict':
      return new ArmHttpError(
        409,
        'Conflict',
        'Another operation on this or a dependent resource is in progress.',
      )
    case 'unauthorized':
      return new ArmHttpError(
        401,
        'ExpiredAuthenticationToken',
        'The access token expiry UTC time is earlier than current UTC time.',
      )
    case 'forbidden':
      return new ArmHttpError(
        403,
        'AuthorizationFailed',
        `The client does not have authorization to perform action '${deniedAction(route)}'.`,
      )
    default:
      return new ArmHttpError(
        500,
        'InternalServerError',
        `fault ${fault.kind} cannot answer a request`,
      )
  }
}

/** The action a 403 names for a request on `route`. */
function deniedAction(route: ArmRoute): string {
  switch (route.kind) {
    case 'subnet':
      return 'Microsoft.Network/virtualNetworks/subnets/read'
    case 'networkSecurityGroup':
      return 'Microsoft.Network/networkSecurityGroups/read'
    case 'runtimeView':
      return 'Microsoft.StandbyPool/standbyContainerGroupPools/runtimeViews/read'
    case 'profile':
      return 'Microsoft.ContainerInstance/containerGroupProfiles/read'
    default:
      return 'Microsoft.ContainerInstance/containerGroups/write'
  }
}
