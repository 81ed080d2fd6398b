import { SandboxBackendUnavailableError, SandboxOperationError } from '@cordon/core'
import { sleep, timeLimit } from '@cordon/core/backend'
import {
  BACKEND_NAME,
  LIFETIME_CONFIG_MAP_KEY,
  SECRET_CONFIG_MAP_KEY,
  STANDBY_POOL_API_VERSION,
} from './aci-defaults.js'
import type { ArmClient, ArmResponse } from './arm-client.js'
import { followLongRunningOperation, provisioningStateOf } from './arm-long-running.js'
import { placementRefusal } from './group-placement.js'
import { describePoolCounts, isPoolExhausted, parsePoolRuntimeView } from './pool-runtime-view.js'
import { type ProfileFacts, parseProfileDocument } from './profile-facts.js'

export interface StandbyPoolClaimsOptions {
  readonly client: ArmClient
  readonly subscriptionId: string
  readonly resourceGroup: string
  readonly location: string
  readonly standbyPoolResourceId: string
  readonly containerGroupProfileResourceId: string
  readonly containerGroupProfileRevision: number | undefined
  readonly subnetId: string | undefined
  readonly apiVersion: string
  readonly agentPort: number
  /** Tags every claimed group carries, so a crashed host's groups can be found. */
  readonly tags: Readonly<Record<string, string>>
}

export interface ClaimRequest {
  readonly groupName: string
  readonly sandboxId: string
  readonly secret: string
  /** Tags of this group beyond the provider's (a detached sandbox's end time). */
  readonly tags: Readonly<Record<string, string>>
  /** Given, the agent ends itself this long after it starts (a detached sandbox). */
  readonly lifetimeMs: number | undefined
  readonly profile: ProfileFacts
  readonly signal: AbortSignal
  /** Each PUT attempt, so a failed create can wait for one still on the wire before deleting. */
  readonly onPut: (attempt: Promise<unknown>) => void
  /** The latest reason the claim is waiting (throttling, an empty pool), for the timeout error. */
  readonly onSetback: (reason: Error) => void
  readonly onPhase: (phase: string) => void
}

export interface ClaimedGroup {
  readonly groupName: string
  /** The group's IP address: private in the subnet, or public. */
  readonly address: string
}

const ADDRESS_POLL_MS = 250
const EMPTY_POOL_FIRST_WAIT_MS = 500
const RELEASE_LIMIT_MS = 120_000
const EMPTY_POOL_MAX_WAIT_MS = 5_000

/**
 * Claims container groups from the standby pool and deletes them, through
 * ACI's container-group API: a claim is a PUT of a new group naming the
 * profile and the pool, whose only override is the container's config map
 * (carrying this sandbox's agent secret).
 */
export class StandbyPoolClaims {
  constructor(private readonly options: StandbyPoolClaimsOptions) {}

  groupUrl(groupName: string): string {
    const { subscriptionId, resourceGroup, apiVersion } = this.options
    return this.options.client.resourceUrl(
      `/subscriptions/${encodeURIComponent(subscriptionId)}/resourceGroups/${encodeURIComponent(resourceGroup)}/providers/Microsoft.ContainerInstance/containerGroups/${encodeURIComponent(groupName)}`,
      apiVersion,
    )
  }

  /** URL of the resource group's container groups (ARM's List By Resource Group). */
  groupsUrl(): string {
    const { subscriptionId, resourceGroup, apiVersion } = this.options
    return this.options.client.resourceUrl(
      `/subscriptions/${encodeURIComponent(subscriptionId)}/resourceGroups/${encodeURIComponent(resourceGroup)}/providers/Microsoft.ContainerInstance/containerGroups`,
      apiVersion,
    )
  }

  /** One group's document (with its instance view), or undefined when ARM has no such group. */
  async readGroup(groupName: string, signal?: AbortSignal): Promise<unknown> {
    const { client } = this.options
    const response = await client.send('GET', this.groupUrl(groupName), signal ? { signal } : {})
    if (response.status === 404) return undefined
    if (response.status !== 200) throw client.failure('connect', response)
    return response.body
  }

  /**
   * Every container group of the resource group, cordon's or not, following
   * ARM's `nextLink` pages. Lists carry no instance views.
   */
  async listGroups(signal?: AbortSignal): Promise<unknown[]> {
    const { client } = this.options
    const groups: unknown[] = []
    let url: string | undefined = this.groupsUrl()
    while (url !== undefined) {
      const response = await client.send('GET', url, signal ? { signal } : {})
      if (response.status !== 200) throw client.failure('list', response)
      const page = response.body as { value?: unknown; nextLink?: unknown } | undefined
      if (Array.isArray(page?.value)) groups.push(...page.value)
      url =
        typeof page?.nextLink === 'string' && page.nextLink.length > 0 ? page.nextLink : undefined
    }
    return groups
  }

  /** Reads the profile (at the pinned revision, if one is configured). */
  async readProfile(signal?: AbortSignal): Promise<ProfileFacts> {
    const { client, containerGroupProfileResourceId, containerGroupProfileRevision, apiVersion } =
      this.options
    const id =
      containerGroupProfileRevision === undefined
        ? containerGroupProfileResourceId
        : `${containerGroupProfileResourceId}/revisions/${containerGroupProfileRevision}`
    const response = await client.send(
      'GET',
      client.resourceUrl(id, apiVersion),
      signal ? { signal } : {},
    )
    if (response.status !== 200) throw client.failure('read profile', response)
    return parseProfileDocument(response.body, this.options.agentPort)
  }

  /** The pool's instance counts, e.g. `0 running, 2 creating` (for errors). */
  async describePool(signal: AbortSignal): Promise<string> {
    const { client, standbyPoolResourceId } = this.options
    const response = await client.send(
      'GET',
      client.resourceUrl(`${standbyPoolResourceId}/runtimeViews/latest`, STANDBY_POOL_API_VERSION),
      { signal, maxAttempts: 2 },
    )
    if (response.status !== 200) return `runtime view unavailable (HTTP ${response.status})`
    return describePoolCounts(parsePoolRuntimeView(response.body))
  }

  /**
   * Claims one group and resolves when ARM reports it provisioned with an
   * address. An empty pool is waited out (the pool refills on its own), and
   * throttling and transient failures are retried, all within the signal.
   */
  async claim(request: ClaimRequest): Promise<ClaimedGroup> {
    const { client } = this.options
    const url = this.groupUrl(request.groupName)
    const body = this.claimBody(request)
    let emptyWaitMs = EMPTY_POOL_FIRST_WAIT_MS
    let accepted: ArmResponse
    for (;;) {
      const response = await client.send('PUT', url, {
        body,
        signal: request.signal,
        maxAttempts: Number.POSITIVE_INFINITY,
        finishInFlight: true,
        onAttempt: request.onPut,
        onTransient: request.onSetback,
      })
      if (response.status === 200 || response.status === 201 || response.status === 202) {
        accepted = response
        break
      }
      if (!isPoolExhausted(response)) throw client.failure('claim', response)
      const counts = await this.describePool(request.signal).catch(
        (error: unknown) => `runtime view unavailable: ${(error as Error).message}`,
      )
      request.onSetback(
        new SandboxBackendUnavailableError(
          BACKEND_NAME,
          `the standby pool has no ready container group to claim (${counts})`,
          {
            cause: client.failure('claim', response),
          },
        ),
      )
      await sleep(emptyWaitMs, request.signal, 'claim')
      emptyWaitMs = Math.min(EMPTY_POOL_MAX_WAIT_MS, emptyWaitMs * 2)
    }
    request.onPhase('claim.provisioning')
    await followLongRunningOperation(client, accepted, {
      resourceUrl: url,
      operation: 'claim',
      signal: request.signal,
      onTransient: request.onSetback,
      maxAttempts: Number.POSITIVE_INFINITY,
    })
    request.onPhase('claim.address')
    const group = await this.waitForAddress(url, request.signal, request.onSetback)
    const refusal =
      this.options.subnetId === undefined
        ? undefined
        : placementRefusal(request.groupName, group, this.options.subnetId)
    if (refusal) throw refusal
    return { groupName: request.groupName, address: addressOf(group)! }
  }

  /**
   * Whether a claimed group is gone: `evicted` when ARM no longer has it (the
   * platform or someone else deleted it), `lost` when it has it but it
   * stopped or failed, undefined while it is running.
   */
  async whyGone(groupName: string, signal?: AbortSignal): Promise<'evicted' | 'lost' | undefined> {
    const { client } = this.options
    const response = await client.send('GET', this.groupUrl(groupName), {
      ...(signal ? { signal } : {}),
    })
    if (response.status === 404) return 'evicted'
    if (response.status !== 200) throw client.failure('claim', response)
    const state = provisioningStateOf(response.body) ?? ''
    const instance = (
      response.body as { properties?: { instanceView?: { state?: unknown } } } | undefined
    )?.properties?.instanceView?.state
    if (/^(failed|canceled|cancelled|deleting)$/i.test(state)) return 'lost'
    if (typeof instance === 'string' && /^(stopped|failed)$/i.test(instance)) return 'lost'
    return undefined
  }

  /**
   * Deletes a group and resolves when it is gone. A group ARM does not know
   * (404, or 204 on DELETE) is already gone.
   */
  async release(groupName: string, callerSignal?: AbortSignal): Promise<void> {
    const { client } = this.options
    // ARM ends every operation eventually; this bound keeps a stuck one from polling forever.
    const signal = timeLimit(RELEASE_LIMIT_MS, callerSignal)
    const url = this.groupUrl(groupName)
    const response = await client.send('DELETE', url, { signal })
    if (response.status === 404 || response.status === 204 || response.status === 200) return
    if (response.status !== 202) throw client.failure('delete', response)
    if (response.headers['azure-asyncoperation'] || response.headers.location) {
      await followLongRunningOperation(client, response, {
        resourceUrl: url,
        operation: 'delete',
        signal,
      })
      return
    }
    // Accepted without a monitor: the group is gone when ARM stops finding it.
    for (;;) {
      await sleep(ADDRESS_POLL_MS * 4, signal, 'delete')
      const probe = await client.send('GET', url, { signal })
      if (probe.status === 404) return
      if (probe.status !== 200) throw client.failure('delete', probe)
    }
  }

  private claimBody(request: ClaimRequest): Record<string, unknown> {
    const o = this.options
    return {
      location: o.location,
      tags: { ...o.tags, ...request.tags, 'cordon.sandbox': request.sandboxId },
      properties: {
        containerGroupProfile: {
          id: o.containerGroupProfileResourceId,
          ...(o.containerGroupProfileRevision === undefined
            ? {}
            : { revision: o.containerGroupProfileRevision }),
        },
        // Fail instead of silently falling back to a cold create of 10 to 30 s: an empty pool is waited out above.
        standbyPoolProfile: {
          id: o.standbyPoolResourceId,
          failContainerGroupCreateOnReuseFailure: true,
        },
        containers: [
          {
            name: request.profile.containerName,
            properties: {
              // The lifetime first: the entrypoint starts the agent once the secret is there.
              configMap: {
                keyValuePairs: {
                  ...(request.lifetimeMs === undefined
                    ? {}
                    : { [LIFETIME_CONFIG_MAP_KEY]: String(request.lifetimeMs) }),
                  [SECRET_CONFIG_MAP_KEY]: request.secret,
                },
              },
            },
          },
        ],
        ...(o.subnetId === undefined ? {} : { subnetIds: [{ id: o.subnetId }] }),
      },
    }
  }

  /** Polls the group until ARM reports it provisioned and gives it an address. */
  private async waitForAddress(
    url: string,
    signal: AbortSignal,
    onSetback: (reason: Error) => void,
  ): Promise<unknown> {
    const { client } = this.options
    for (;;) {
      const response = await client.send('GET', url, {
        signal,
        maxAttempts: Number.POSITIVE_INFINITY,
        onTransient: onSetback,
      })
      if (response.status !== 200) throw client.failure('claim', response)
      const state = provisioningStateOf(response.body) ?? ''
      if (/^(failed|canceled|cancelled)$/i.test(state)) {
        throw new SandboxOperationError('claim', `the claimed container group ended ${state}`)
      }
      if (/^succeeded$/i.test(state) && addressOf(response.body)) return response.body
      await sleep(ADDRESS_POLL_MS, signal, 'claim')
    }
  }
}

export function addressOf(group: unknown): string | undefined {
  const ip = (group as { properties?: { ipAddress?: { ip?: unknown } } } | undefined)?.properties
    ?.ipAddress?.ip
  return typeof ip === 'string' && ip.length > 0 ? ip : undefined
}
