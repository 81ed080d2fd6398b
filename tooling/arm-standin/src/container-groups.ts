import { randomUUID } from 'node:crypto'
import { ArmHttpError } from './arm-http.js'
import type { FaultPlan } from './fault-plan.js'
import type { SandboxContainer } from './sandbox-container.js'
import type { StandbyPool } from './standby-pool.js'
import { profileGroupProperties, type StandinProfileSpec } from './standin-profile.js'

export interface StandinResourceIds {
  readonly subscriptionId: string
  readonly resourceGroup: string
  readonly location: string
  readonly standbyPoolResourceId: string
  readonly containerGroupProfileResourceId: string
  /** The subnet the pool's groups join; here the `--internal` Docker network. */
  readonly subnetId: string
}

type ProvisioningState = 'Pending' | 'Creating' | 'Succeeded' | 'Failed' | 'Deleting'
type OperationStatus = 'InProgress' | 'Succeeded' | 'Failed' | 'Canceled'

interface GroupRecord {
  readonly name: string
  readonly location: string
  readonly tags: Readonly<Record<string, string>>
  readonly configMap: Readonly<Record<string, string>>
  readonly failOnReuseFailure: boolean
  readonly fromStandbyPool: boolean
  state: ProvisioningState
  container: SandboxContainer | undefined
  provisioning: Promise<void>
  createOperation: OperationRecord
  deleteOperation: OperationRecord | undefined
  /** Fires when a DELETE arrives, cutting a slow provisioning short. */
  readonly deleted: AbortController
}

interface OperationRecord {
  readonly id: string
  readonly kind: 'create' | 'delete'
  readonly groupName: string
  readonly startTime: string
  status: OperationStatus
  endTime?: string
  error?: { code: string; message: string }
}

/** What the HTTP layer sends back. */
export interface ArmAnswer {
  readonly status: number
  readonly body?: unknown
  readonly headers?: Readonly<Record<string, string>>
}

export interface ContainerGroupsOptions {
  readonly ids: StandinResourceIds
  readonly profile: StandinProfileSpec
  readonly pool: StandbyPool
  /** Starts a container outside the pool, for a claim that may fall back to a cold create. */
  readonly startCold: () => Promise<SandboxContainer>
  readonly faults: FaultPlan
  /** `Retry-After` on every long-running-operation answer. */
  readonly retryAfterSeconds: number
  /** How a claim's PUT points at its operation (default: `Azure-AsyncOperation`). */
  readonly lroStyle: 'azure-async-operation' | 'location'
  readonly baseUrl: () => string
}

/**
 * The container groups of the stand-in and their long-running operations,
 * with ARM's semantics: a claim is a PUT that answers at once (201 with
 * `Azure-AsyncOperation`, or 202 with `Location`) while the group goes
 * Pending, Creating, Succeeded (or Failed); DELETE answers 202 and the group
 * is gone when its operation ends; a second DELETE of a gone group is 404.
 */
export class ContainerGroups {
  private readonly groups = new Map<string, GroupRecord>()
  private readonly operations = new Map<string, OperationRecord>()

  constructor(private readonly options: ContainerGroupsOptions) {}

  names(): string[] {
    return [...this.groups.keys()]
  }

  async claim(name: string, body: unknown, apiVersion: string): Promise<ArmAnswer> {
    const claim = this.parseClaim(body)
    const key = name.toLowerCase()
    if (this.groups.has(key)) {
      throw new ArmHttpError(
        409,
        'Conflict',
        `The container group '${name}' already exists and is not in the standby pool; a claim must create a new group.`,
      )
    }
    const poolEmpty = this.options.faults.take(['pool-empty'], {
      method: 'PUT',
      resource: 'containerGroup',
    })
    const container = poolEmpty ? undefined : this.options.pool.take()
    if (!container && claim.failOnReuseFailure) {
      throw new ArmHttpError(
        400,
        'StandbyPoolReservationFailed',
        `Could not reserve a container group from standby pool '${this.options.ids.standbyPoolResourceId}': InsufficientContainerGroups.`,
        {},
        [
          {
            code: 'InsufficientContainerGroups',
            message: 'The standby pool has no ready container group.',
          },
        ],
      )
    }
    const createOperation = this.newOperation('create', key)
    const record: GroupRecord = {
      name,
      location: claim.location,
      tags: claim.tags,
      configMap: claim.configMap,
      failOnReuseFailure: claim.failOnReuseFailure,
      fromStandbyPool: container !== undefined,
      state: 'Pending',
      container,
      provisioning: Promise.resolve(),
      createOperation,
      deleteOperation: undefined,
      deleted: new AbortController(),
    }
    this.groups.set(key, record)
    const retryAfter = { 'retry-after': String(this.options.retryAfterSeconds) }
    // The answer shows the group as accepted (Pending); provisioning starts after it is made.
    const answer: ArmAnswer =
      this.options.lroStyle === 'location'
        ? {
            status: 202,
            headers: {
              ...retryAfter,
              location: this.operationUrl(createOperation, 'result', apiVersion),
            },
          }
        : {
            status: 201,
            body: await this.document(record),
            headers: {
              ...retryAfter,
              'azure-asyncoperation': this.operationUrl(createOperation, 'status', apiVersion),
            },
          }
    record.provisioning = this.provision(record).catch((error: unknown) => {
      this.finish(record.createOperation, 'Failed', {
        code: 'ContainerGroupProvisioningFailed',
        message: (error as Error)?.message ?? String(error),
      })
      if (!record.deleteOperation) record.state = 'Failed'
    })
    return answer
  }

  async get(name: string): Promise<ArmAnswer> {
    return { status: 200, body: await this.document(this.require(name)) }
  }

  /**
   * ARM's List By Resource Group: every group, without the instance views
   * (ARM leaves them out of lists; a GET of one group has them). One page:
   * a real list may answer with a `nextLink` to follow.
   */
  async list(): Promise<ArmAnswer> {
    const documents = await Promise.all(
      [...this.groups.values()].map((record) => this.document(record, { listed: true })),
    )
    return { status: 200, body: { value: documents } }
  }

  delete(name: string, apiVersion: string): ArmAnswer {
    const record = this.require(name)
    if (!record.deleteOperation) {
      const operation = this.newOperation('delete', name.toLowerCase())
      record.deleteOperation = operation
      record.state = 'Deleting'
      record.deleted.abort()
      void this.remove(record, operation)
    }
    return {
      status: 202,
      headers: {
        'retry-after': String(this.options.retryAfterSeconds),
        location: this.operationUrl(record.deleteOperation, 'result', apiVersion),
        'azure-asyncoperation': this.operationUrl(record.deleteOperation, 'status', apiVersion),
      },
    }
  }

  async operation(id: string, style: 'status' | 'result', apiVersion: string): Promise<ArmAnswer> {
    const operation = this.operations.get(id)
    if (!operation)
      throw new ArmHttpError(404, 'OperationNotFound', `The operation '${id}' was not found.`)
    const retryAfter = { 'retry-after': String(this.options.retryAfterSeconds) }
    if (style === 'status') {
      return {
        status: 200,
        headers: operation.status === 'InProgress' ? retryAfter : {},
        body: {
          id: new URL(this.operationUrl(operation, 'status', apiVersion)).pathname,
          name: operation.id,
          status: operation.status,
          startTime: operation.startTime,
          ...(operation.endTime ? { endTime: operation.endTime } : {}),
          ...(operation.error ? { error: operation.error } : {}),
        },
      }
    }
    if (operation.status === 'InProgress') {
      return {
        status: 202,
        headers: { ...retryAfter, location: this.operationUrl(operation, 'result', apiVersion) },
      }
    }
    if (operation.status !== 'Succeeded') {
      const error = operation.error ?? {
        code: 'OperationCanceled',
        message: 'The operation was canceled.',
      }
      throw new ArmHttpError(400, error.code, error.message)
    }
    if (operation.kind === 'delete') return { status: 204 }
    const record = this.groups.get(operation.groupName)
    return record ? { status: 200, body: await this.document(record) } : { status: 204 }
  }

  /** Removes every group's container (the stand-in is closing). */
  async close(): Promise<void> {
    const records = [...this.groups.values()]
    this.groups.clear()
    await Promise.allSettled(
      records.map(async (record) => {
        await record.provisioning
        await record.container?.remove()
      }),
    )
  }

  private async provision(record: GroupRecord): Promise<void> {
    record.state = 'Creating'
    record.container ??= await this.options.startCold()
    if (record.deleteOperation) return
    for (const [key, value] of Object.entries(record.configMap))
      await record.container.setConfigMapValue(key, value)
    const delayMs = this.options.faults.provisioningDelayMs
    if (delayMs > 0) await delayUnless(delayMs, record.deleted.signal)
    if (record.deleteOperation) return
    if (
      this.options.faults.take(['provisioning-failure'], {
        method: 'PUT',
        resource: 'containerGroup',
      })
    ) {
      record.state = 'Failed'
      this.finish(record.createOperation, 'Failed', {
        code: 'ContainerGroupProvisioningFailed',
        message: `Container group '${record.name}' failed to provision (injected fault).`,
      })
      return
    }
    record.state = 'Succeeded'
    this.finish(record.createOperation, 'Succeeded')
  }

  private async remove(record: GroupRecord, operation: OperationRecord): Promise<void> {
    await record.provisioning
    if (record.createOperation.status === 'InProgress')
      this.finish(record.createOperation, 'Canceled', {
        code: 'OperationCanceled',
        message: `The container group '${record.name}' was deleted while it was being created.`,
      })
    try {
      await record.container?.remove()
      this.finish(operation, 'Succeeded')
    } catch (error) {
      this.finish(operation, 'Failed', {
        code: 'InternalServerError',
        message: (error as Error).message,
      })
    } finally {
      this.groups.delete(record.name.toLowerCase())
    }
  }

  private require(name: string): GroupRecord {
    const record = this.groups.get(name.toLowerCase())
    if (!record) {
      throw new ArmHttpError(
        404,
        'ResourceNotFound',
        `The Resource 'Microsoft.ContainerInstance/containerGroups/${name}' under resource group '${this.options.ids.resourceGroup}' was not found.`,
      )
    }
    return record
  }

  private newOperation(kind: OperationRecord['kind'], groupName: string): OperationRecord {
    const operation: OperationRecord = {
      id: randomUUID(),
      kind,
      groupName,
      startTime: new Date().toISOString(),
      status: 'InProgress',
    }
    this.operations.set(operation.id, operation)
    return operation
  }

  private finish(
    operation: OperationRecord,
    status: OperationStatus,
    error?: { code: string; message: string },
  ): void {
    if (operation.status !== 'InProgress') return
    operation.status = status
    operation.endTime = new Date().toISOString()
    if (error) operation.error = error
  }

  private operationUrl(
    operation: OperationRecord,
    style: 'status' | 'result',
    apiVersion: string,
  ): string {
    const { subscriptionId, location } = this.options.ids
    const segment = style === 'status' ? 'operations' : 'operationResults'
    return `${this.options.baseUrl()}/subscriptions/${subscriptionId}/providers/Microsoft.ContainerInstance/locations/${location}/${segment}/${operation.id}?api-version=${encodeURIComponent(apiVersion)}`
  }

  private async document(
    record: GroupRecord,
    options: { listed?: boolean } = {},
  ): Promise<Record<string, unknown>> {
    const { ids, profile } = this.options
    const provisioned = record.state === 'Succeeded'
    // A provisioned group whose container's process ended (restartPolicy Never) is Stopped.
    const running = provisioned && (await record.container?.isRunning()) === true
    const instanceState = running ? 'Running' : provisioned ? 'Stopped' : 'Pending'
    const containerState = running ? 'Running' : provisioned ? 'Terminated' : 'Waiting'
    const inherited = profileGroupProperties(profile)
    return {
      id: `/subscriptions/${ids.subscriptionId}/resourceGroups/${ids.resourceGroup}/providers/Microsoft.ContainerInstance/containerGroups/${record.name}`,
      name: record.name,
      type: 'Microsoft.ContainerInstance/containerGroups',
      location: record.location,
      tags: record.tags,
      properties: {
        ...inherited,
        provisioningState: record.state,
        isCreatedFromStandbyPool: record.fromStandbyPool,
        containerGroupProfile: {
          id: ids.containerGroupProfileResourceId,
          revision: profile.revision,
        },
        standbyPoolProfile: {
          id: ids.standbyPoolResourceId,
          failContainerGroupCreateOnReuseFailure: record.failOnReuseFailure,
        },
        containers: inherited.containers.map((container) => ({
          name: container.name,
          properties: {
            ...container.properties,
            // ARM returns config maps as they were set: they are not secure values.
            configMap: { keyValuePairs: record.configMap },
            ...(options.listed
              ? {}
              : { instanceView: { currentState: { state: containerState } } }),
          },
        })),
        ipAddress: {
          ...inherited.ipAddress,
          ...(running && record.container ? { ip: record.container.ip } : {}),
        },
        ...(profile.ipAddressType === 'Private' ? { subnetIds: [{ id: ids.subnetId }] } : {}),
        ...(options.listed ? {} : { instanceView: { state: instanceState } }),
      },
    }
  }

  /** Checks a claim the way ACI does: only the profile, the pool, config maps, subnets and tags. */
  private parseClaim(body: unknown): {
    location: string
    tags: Record<string, string>
    configMap: Record<string, string>
    failOnReuseFailure: boolean
  } {
    const { ids, profile } = this.options
    const bad = (message: string): never => {
      throw new ArmHttpError(400, 'InvalidRequestContent', message)
    }
    if (typeof body !== 'object' || body === null)
      return bad('The request content must be a JSON object.')
    const raw = body as Record<string, unknown>
    const location =
      typeof raw.location === 'string' ? raw.location : bad("'location' is required.")
    if (normalizeLocation(location) !== normalizeLocation(ids.location)) {
      bad(
        `The location '${location}' does not match the standby pool's location '${ids.location}'.`,
      )
    }
    const properties = (raw.properties ?? {}) as Record<string, unknown>
    const profileRef = (properties.containerGroupProfile ?? {}) as Record<string, unknown>
    if (!sameId(profileRef.id, ids.containerGroupProfileResourceId)) {
      bad(`containerGroupProfile.id must be '${ids.containerGroupProfileResourceId}'.`)
    }
    if (profileRef.revision !== undefined && profileRef.revision !== profile.revision) {
      throw new ArmHttpError(
        404,
        'ContainerGroupProfileRevisionNotFound',
        `Revision ${String(profileRef.revision)} of the container group profile does not exist.`,
      )
    }
    const poolRef = (properties.standbyPoolProfile ?? {}) as Record<string, unknown>
    if (!sameId(poolRef.id, ids.standbyPoolResourceId))
      bad(`standbyPoolProfile.id must be '${ids.standbyPoolResourceId}'.`)
    const configMap: Record<string, string> = {}
    for (const entry of (properties.containers ?? []) as Array<Record<string, unknown>>) {
      if (entry?.name !== profile.containerName)
        bad(`The profile has no container named '${String(entry?.name)}'.`)
      const overrides = Object.keys((entry.properties ?? {}) as object).filter(
        (key) => key !== 'configMap',
      )
      if (overrides.length > 0) {
        bad(
          `A claim from a standby pool can only set configMap on a container, not ${overrides.join(', ')}.`,
        )
      }
      const pairs =
        (
          ((entry.properties ?? {}) as Record<string, unknown>).configMap as {
            keyValuePairs?: unknown
          }
        )?.keyValuePairs ?? {}
      for (const [key, value] of Object.entries(pairs as Record<string, unknown>)) {
        if (!/^[-._a-zA-Z0-9]+$/.test(key) || typeof value !== 'string')
          bad(`configMap key '${key}' is invalid.`)
        configMap[key] = value as string
      }
    }
    const subnetIds = properties.subnetIds as Array<{ id?: unknown }> | undefined
    if (subnetIds !== undefined) {
      if (profile.ipAddressType === 'Public')
        bad('A group with a public IP address cannot join a subnet.')
      if (subnetIds.length !== 1 || !sameId(subnetIds[0]?.id, ids.subnetId)) {
        bad(`subnetIds must name the standby pool's subnet '${ids.subnetId}'.`)
      }
    }
    const tags: Record<string, string> = {}
    for (const [key, value] of Object.entries((raw.tags ?? {}) as Record<string, unknown>)) {
      if (typeof value !== 'string' || /[<>%&\\?/]/.test(key)) bad(`The tag '${key}' is invalid.`)
      tags[key] = value as string
    }
    return {
      location,
      tags,
      configMap,
      failOnReuseFailure: poolRef.failContainerGroupCreateOnReuseFailure === true,
    }
  }
}

function delayUnless(ms: number, signal: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    const timer = setTimeout(resolve, ms)
    signal.addEventListener('abort', () => {
      clearTimeout(timer)
      resolve()
    })
  })
}

function normalizeLocation(location: string): string {
  return location.replace(/\s+/g, '').toLowerCase()
}

function sameId(value: unknown, expected: string): boolean {
  return typeof value === 'string' && value.toLowerCase() === expected.toLowerCase()
}
