import { randomBytes } from 'node:crypto'
import { SandboxVolumeError, type SandboxVolumeInfo, type SandboxVolumeUser } from '@cordon/core'
import { LABEL, type SandboxBackendVolumes, throwIfAborted } from '@cordon/core/backend'
import type Docker from 'dockerode'
import { engineMessage, engineStatus, isNotFound, translateEngineError } from './engine-errors.js'

/**
 * Named persistent volumes on a Docker Engine.
 *
 * A cordon volume `name` is the engine volume `cordon-volume.<name>`
 * (local driver), labelled as cordon's (`cordon.managed`, the owner's
 * labels, `cordon.role=volume`) with its name, size and creation time. The
 * prefix keeps cordon's names apart from everything else on the engine, and
 * the labels are checked on every use: an engine volume of that name that
 * cordon did not make is never mounted, listed or removed as one, and its
 * name is refused at `create()`.
 *
 * Who uses a volume is read from the engine, not kept by cordon: a live
 * sandbox container (running, paused, restarting, or created within
 * {@link CREATED_CLAIM_MS}) that mounts it holds it, read-write or
 * read-only as it is mounted. A sandbox that ended, whatever ended it, holds
 * nothing, so no claim outlives its sandbox.
 *
 * When a volume was last used is kept beside it, in small engine volumes of
 * role `volume-use` (labels are fixed once an engine volume exists): one is
 * made at each mount and release, and the older ones removed. `cordon gc`
 * counts its retention from the newest.
 */

export const VOLUME_PREFIX = 'cordon-volume.'
const USE_PREFIX = 'cordon-volume-use.'

/** Labels of a named volume and of its use records, beside cordon's own ({@link LABEL}). */
export const VOLUME_LABEL = {
  name: 'cordon.volume.name',
  sizeMb: 'cordon.volume.size-mb',
  createdAt: 'cordon.volume.created-at',
  /** Tells which of two racing `create()` calls made the volume. */
  token: 'cordon.volume.token',
  usedAt: 'cordon.volume.used-at',
} as const

/**
 * How long a container that was created but never started still holds the
 * volumes it mounts: longer than any create takes from creating the
 * container to starting it, short enough that a host that died in between
 * blocks no one for long.
 */
export const CREATED_CLAIM_MS = 5 * 60_000

/** The engine's name of cordon volume `name`. */
export function engineVolumeName(name: string): string {
  return `${VOLUME_PREFIX}${name}`
}

/** One mount of a named volume that a sandbox asks for. */
export interface VolumeMountRequest {
  readonly name: string
  readonly readOnly: boolean
}

/** A cordon volume as its engine labels describe it. */
interface VolumeRecord {
  readonly name: string
  readonly sizeMb: number
  readonly createdAt: number
  readonly token: string | undefined
}

function recordOf(
  engineName: string,
  labels: Record<string, string> | null | undefined,
): VolumeRecord | undefined {
  if (!labels) return undefined
  if (labels[LABEL.managed] !== '1' || labels[LABEL.role] !== 'volume') return undefined
  const name = labels[VOLUME_LABEL.name]
  const sizeMb = Number(labels[VOLUME_LABEL.sizeMb])
  const createdAt = Number(labels[VOLUME_LABEL.createdAt])
  if (!name || engineVolumeName(name) !== engineName) return undefined
  if (!Number.isSafeInteger(sizeMb) || sizeMb <= 0 || !Number.isFinite(createdAt)) return undefined
  return { name, sizeMb, createdAt, token: labels[VOLUME_LABEL.token] }
}

interface ContainerMount {
  readonly Type?: string
  readonly Name?: string
  readonly RW?: boolean
}

/** The sandboxes that mount each volume now, by the volume's engine name. */
async function liveUsers(
  docker: Docker,
  now: number,
  excludeContainer?: string,
): Promise<Map<string, Array<SandboxVolumeUser & { containerId: string }>>> {
  const users = new Map<string, Array<SandboxVolumeUser & { containerId: string }>>()
  const containers = await docker.listContainers({ all: true })
  for (const container of containers) {
    if (container.Id === excludeContainer) continue
    const live =
      container.State === 'running' ||
      container.State === 'paused' ||
      container.State === 'restarting' ||
      (container.State === 'created' && now - container.Created * 1000 < CREATED_CLAIM_MS)
    if (!live) continue
    for (const mount of (container.Mounts ?? []) as ContainerMount[]) {
      if (mount.Type !== 'volume' || !mount.Name?.startsWith(VOLUME_PREFIX)) continue
      const list = users.get(mount.Name) ?? []
      list.push({
        sandboxId: container.Labels?.[LABEL.sandbox] ?? container.Id,
        access: mount.RW === false ? 'read-only' : 'read-write',
        containerId: container.Id,
      })
      users.set(mount.Name, list)
    }
  }
  return users
}

/**
 * Why `request` cannot be mounted beside `users`: a read-write mount needs
 * the volume to itself, a read-only one shares it only with other readers.
 */
function conflict(
  request: VolumeMountRequest,
  users: readonly SandboxVolumeUser[],
): SandboxVolumeError | undefined {
  const blocking = request.readOnly ? users.filter((user) => user.access === 'read-write') : users
  if (blocking.length === 0) return undefined
  const named = blocking.map((user) => `${user.sandboxId} (${user.access})`).join(', ')
  return new SandboxVolumeError(
    request.name,
    'in-use',
    request.readOnly
      ? `cannot be mounted read-only while ${named} mounts it read-write; a volume is written by one sandbox at a time, and read by others only while no one writes it`
      : `cannot be mounted read-write while ${named} mounts it; a volume is written by one sandbox at a time`,
    { users: blocking.map(({ sandboxId, access }) => ({ sandboxId, access })) },
  )
}

export interface DockerVolumesOptions {
  readonly docker: Docker
  readonly backend: string
  /** The engine as errors name it. */
  readonly engine: string
  /** The labels every resource this process makes carries (the config's and the owner's). */
  readonly labels: () => Record<string, string>
}

/** `provider.volumes` on a Docker Engine, and the checks a sandbox's create makes before mounting. */
export class DockerVolumes implements SandboxBackendVolumes {
  constructor(private readonly options: DockerVolumesOptions) {}

  private get docker(): Docker {
    return this.options.docker
  }

  private async engineCall<T>(operation: string, call: () => Promise<T>): Promise<T> {
    try {
      return await call()
    } catch (error) {
      throw translateEngineError(error, this.options.backend, this.options.engine, operation)
    }
  }

  /** The cordon volume `name`, or undefined when the engine has none (or one that is not cordon's). */
  private async find(name: string): Promise<VolumeRecord | undefined> {
    const engineName = engineVolumeName(name)
    const inspected = await this.docker
      .getVolume(engineName)
      .inspect()
      .catch((error: unknown) => {
        if (isNotFound(error)) return undefined
        throw error
      })
    if (!inspected) return undefined
    return recordOf(engineName, inspected.Labels as Record<string, string> | null)
  }

  async create(options: {
    readonly name: string
    readonly sizeMb: number
    readonly signal?: AbortSignal
  }): Promise<SandboxVolumeInfo> {
    throwIfAborted(options.signal, 'volumes.create')
    const { name, sizeMb } = options
    const engineName = engineVolumeName(name)
    return this.engineCall('volumes.create', async () => {
      const existing = await this.docker
        .getVolume(engineName)
        .inspect()
        .catch((error: unknown) => {
          if (isNotFound(error)) return undefined
          throw error
        })
      if (existing) throw this.taken(name, engineName, existing.Labels)
      const token = randomBytes(12).toString('hex')
      const createdAt = Date.now()
      // The engine answers a create of a name it has with the volume it has:
      // the token read back tells whether this call made it.
      await this.docker.createVolume({
        Name: engineName,
        Driver: 'local',
        Labels: {
          ...this.options.labels(),
          [LABEL.role]: 'volume',
          [VOLUME_LABEL.name]: name,
          [VOLUME_LABEL.sizeMb]: String(sizeMb),
          [VOLUME_LABEL.createdAt]: String(createdAt),
          [VOLUME_LABEL.token]: token,
        },
      })
      const labels = (await this.docker.getVolume(engineName).inspect()).Labels as
        | Record<string, string>
        | undefined
      if (labels?.[VOLUME_LABEL.token] !== token) throw this.taken(name, engineName, labels)
      return { name, sizeMb, createdAt, lastUsedAt: createdAt, usedBy: [] }
    })
  }

  private taken(
    name: string,
    engineName: string,
    labels: Record<string, string> | null | undefined,
  ): SandboxVolumeError {
    return new SandboxVolumeError(
      name,
      'exists',
      recordOf(engineName, labels)
        ? 'a cordon volume of this name exists already'
        : `the engine has a volume named ${engineName} that cordon did not make; cordon neither takes it over nor touches it`,
    )
  }

  async list(options: { readonly signal?: AbortSignal } = {}): Promise<SandboxVolumeInfo[]> {
    throwIfAborted(options.signal, 'volumes.list')
    return this.engineCall('volumes.list', () => this.listVolumes(Date.now()))
  }

  /**
   * Every cordon volume, with its users and when it was last used; with
   * `scope` (label filters, `key=value`), only those carrying all of them.
   */
  async listVolumes(now: number, scope: readonly string[] = []): Promise<SandboxVolumeInfo[]> {
    const listed =
      (
        await this.docker.listVolumes({
          filters: { label: [`${LABEL.managed}=1`, `${LABEL.role}=volume`, ...scope] },
        })
      ).Volumes ?? []
    const users = await liveUsers(this.docker, now)
    const uses = await this.useRecords()
    const volumes: SandboxVolumeInfo[] = []
    for (const volume of listed) {
      const record = recordOf(volume.Name, volume.Labels as Record<string, string> | null)
      if (!record) continue
      volumes.push({
        name: record.name,
        sizeMb: record.sizeMb,
        createdAt: record.createdAt,
        lastUsedAt: Math.max(
          record.createdAt,
          ...(uses.get(record.name) ?? []).map((use) => use.usedAt),
        ),
        usedBy: (users.get(volume.Name) ?? []).map(({ sandboxId, access }) => ({
          sandboxId,
          access,
        })),
      })
    }
    return volumes.sort((a, b) => a.name.localeCompare(b.name))
  }

  async remove(name: string, options: { readonly signal?: AbortSignal } = {}): Promise<void> {
    throwIfAborted(options.signal, 'volumes.remove')
    await this.engineCall('volumes.remove', async () => {
      if (!(await this.find(name)))
        throw new SandboxVolumeError(name, 'not-found', 'there is no cordon volume of this name')
      const engineName = engineVolumeName(name)
      const users = (await liveUsers(this.docker, Date.now())).get(engineName) ?? []
      if (users.length > 0) throw this.inUseForRemoval(name, users)
      try {
        // Not forced: a container that mounted it since the check above keeps it.
        await this.docker.getVolume(engineName).remove()
      } catch (error) {
        if (isNotFound(error)) return
        if (engineStatus(error) === 409) {
          const now = (await liveUsers(this.docker, Date.now())).get(engineName) ?? []
          throw this.inUseForRemoval(name, now, engineMessage(error))
        }
        throw error
      }
      await this.removeUseRecords(name, () => true)
    })
  }

  private inUseForRemoval(
    name: string,
    users: readonly SandboxVolumeUser[],
    engineSaid?: string,
  ): SandboxVolumeError {
    const named = users.map((user) => `${user.sandboxId} (${user.access})`).join(', ')
    return new SandboxVolumeError(
      name,
      'in-use',
      `cannot be removed while a sandbox mounts it${named ? `: ${named}` : ''}${engineSaid ? ` (the engine said: ${engineSaid})` : ''}`,
      { users: users.map(({ sandboxId, access }) => ({ sandboxId, access })) },
    )
  }

  /**
   * What a sandbox's create checks before it makes its container: every
   * volume exists and is cordon's, and none is held in a way that excludes
   * the mount asked for. Resolves to each volume's size in MiB.
   */
  async checkMounts(requests: readonly VolumeMountRequest[]): Promise<Map<string, number>> {
    const sizes = new Map<string, number>()
    for (const request of requests) {
      const record = await this.find(request.name)
      if (!record)
        throw new SandboxVolumeError(
          request.name,
          'not-found',
          'the layout mounts it, and there is no cordon volume of this name; create it with provider.volumes.create() first (cordon never creates one implicitly)',
        )
      sizes.set(request.name, record.sizeMb)
    }
    await this.checkClaims(requests)
    return sizes
  }

  /**
   * Whether the mounts are free beside every other live sandbox's; run again
   * once this sandbox's container exists (`ownContainer`), so that of two
   * creates racing for one volume neither goes on unseen by the other.
   */
  async checkClaims(requests: readonly VolumeMountRequest[], ownContainer?: string): Promise<void> {
    if (requests.length === 0) return
    if (ownContainer !== undefined)
      // Removed meanwhile (by gc's retention): the engine would have made an empty one in its place.
      for (const request of requests)
        if (!(await this.find(request.name)))
          throw new SandboxVolumeError(
            request.name,
            'not-found',
            'it was removed while the sandbox was being created',
          )
    const users = await liveUsers(this.docker, Date.now(), ownContainer)
    for (const request of requests) {
      const refused = conflict(request, users.get(engineVolumeName(request.name)) ?? [])
      if (refused) throw refused
    }
  }

  /** Records that the volumes were used now (mounted or released); never fails the caller. */
  async recordUse(names: readonly string[]): Promise<void> {
    await Promise.all(
      names.map(async (name) => {
        try {
          const usedAt = Date.now()
          await this.docker.createVolume({
            Name: `${USE_PREFIX}${name}.${usedAt}-${randomBytes(4).toString('hex')}`,
            Driver: 'local',
            Labels: {
              ...this.options.labels(),
              [LABEL.role]: 'volume-use',
              [VOLUME_LABEL.name]: name,
              [VOLUME_LABEL.usedAt]: String(usedAt),
            },
          })
          await this.removeUseRecords(name, (use) => use.usedAt < usedAt)
        } catch {
          // Only gc's retention reads it, and a missed record makes it count from an earlier use.
        }
      }),
    )
  }

  /**
   * The use records on the engine, by volume name; with `scope`, those made
   * by a process whose labels carry all of it.
   */
  async useRecords(
    scope: readonly string[] = [],
  ): Promise<Map<string, Array<{ engineName: string; usedAt: number }>>> {
    const listed =
      (
        await this.docker.listVolumes({
          filters: { label: [`${LABEL.managed}=1`, `${LABEL.role}=volume-use`, ...scope] },
        })
      ).Volumes ?? []
    const uses = new Map<string, Array<{ engineName: string; usedAt: number }>>()
    for (const volume of listed) {
      const labels = (volume.Labels ?? {}) as Record<string, string>
      const name = labels[VOLUME_LABEL.name]
      const usedAt = Number(labels[VOLUME_LABEL.usedAt])
      if (!name || !volume.Name.startsWith(USE_PREFIX) || !Number.isFinite(usedAt)) continue
      uses.set(name, [...(uses.get(name) ?? []), { engineName: volume.Name, usedAt }])
    }
    return uses
  }

  /** Removes the use records of `name` that `which` picks. */
  async removeUseRecords(
    name: string,
    which: (use: { engineName: string; usedAt: number }) => boolean,
  ): Promise<void> {
    for (const use of (await this.useRecords()).get(name) ?? []) {
      if (!which(use)) continue
      await this.docker
        .getVolume(use.engineName)
        .remove()
        .catch(() => {})
    }
  }
}
