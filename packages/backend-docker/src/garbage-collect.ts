import {
  SandboxAbortedError,
  SandboxConfigValidationError,
  type SandboxVolumeInfo,
} from '@cordon/core'
import { judgeOwner, LABEL, type UnjudgedOwnerReason } from '@cordon/core/backend'
import type Docker from 'dockerode'
import { isBeingRemoved, isNotFound, translateEngineError } from './engine-errors.js'
import { listSnapshots, SNAPSHOT_LABEL } from './filesystem-snapshot.js'
import { BUILD_RECORD_ROLE, BUILD_STEP_ROLE } from './image-build.js'
import {
  checkpointAgeMs,
  checkpointOwner,
  engineRootDir,
  listMemoryCheckpoints,
  removeMemoryCheckpoint,
  sweepContainerdCopies,
} from './memory-snapshot.js'
import { DockerVolumes, engineVolumeName } from './named-volumes.js'
import { findRuntimeGarbage } from './runtime-garbage.js'

/** A resource kept because the process collecting cannot judge its owner. */
export interface UnjudgedResource {
  readonly kind: 'container' | 'volume' | 'network'
  /** A container's or network's id, a volume's name. */
  readonly id: string
  readonly reason: UnjudgedOwnerReason
}

/** How long a snapshot is kept unless the host says otherwise: 7 days. */
export const DEFAULT_SNAPSHOT_RETENTION_MS = 7 * 24 * 60 * 60 * 1000

export interface GarbageReport {
  readonly containers: string[]
  /**
   * Images removed: snapshots older than the retention, and those removed
   * by their host (untagged) that no sandbox runs any longer; and the
   * untagged images of the steps of builds whose host is gone (`buildImage`
   * labels them), when no build in the scope is under way.
   */
  readonly images: string[]
  /**
   * Memory snapshots' checkpoints removed from the engine's disk (by snapshot
   * id): those whose snapshot image is gone, or went in this run. Checkpoints
   * are files, not engine objects: only a host that can write the engine's
   * data directory sees them (otherwise this stays empty).
   */
  readonly checkpoints: string[]
  /**
   * The copies containerd unpacked of cordon's checkpoints and never removed
   * (containerd/containerd#10166), by path: a start removes its own, and
   * these are what a host that died during a start left. Only copies of a
   * checkpoint the engine's disk still holds can be told for cordon's, so
   * they are swept before their checkpoint goes.
   */
  readonly checkpointCopies: string[]
  readonly volumes: string[]
  readonly networks: string[]
  /**
   * Resources kept: those with a live owner, agent runtimes in use,
   * snapshots within their retention, and every one in `unjudged`.
   */
  readonly kept: number
  /**
   * Of `kept`, the snapshots kept only because they are younger than the
   * retention: a snapshot outlives its owner, so that owner may be gone.
   */
  readonly snapshotsWithinRetention: number
  /**
   * Kept because this process cannot judge their owner (another machine or
   * boot, another PID or time namespace, or labels without the owner's
   * identity): such an owner may be alive. They go when their lifetime
   * (`cordon.expires`) passes, or by hand.
   */
  readonly unjudged: readonly UnjudgedResource[]
  /** Resources that could not be removed (e.g. a volume still in use), with the engine's reason. */
  readonly failed: Array<{ readonly id: string; readonly reason: string }>
  /**
   * Every named volume (`provider.volumes`), and whether this run removed it
   * (only past `volumeRetentionMs`, and never one in use); a removed one's
   * engine name is in `volumes` too.
   */
  readonly namedVolumes: ReadonlyArray<SandboxVolumeInfo & { readonly removed: boolean }>
  /**
   * The sandbox ids of the detached sandboxes kept (before their end): their
   * credentials still matter. With `labels`, only those within the scope.
   */
  readonly detachedKept: readonly string[]
}

export interface CollectGarbageOptions {
  readonly docker: Docker
  /**
   * The engine as errors name it (`connectEngine(...).description`); an
   * engine that cannot be reached fails with `SandboxBackendUnavailableError`
   * naming it.
   */
  readonly engine?: string
  /** List what would be removed without removing it. */
  readonly dryRun?: boolean
  /**
   * Removes named volumes no sandbox has used for longer than this many ms
   * (counted from the last mount or release, else from creation). Absent,
   * every named volume is kept: they are the user's data, and outlive their
   * owners on purpose.
   */
  readonly volumeRetentionMs?: number
  readonly now?: number
  /**
   * Snapshots older than this many ms are removed, whoever took them
   * (default {@link DEFAULT_SNAPSHOT_RETENTION_MS}). A sandbox already
   * started from one goes on; its image goes when the last such sandbox does.
   */
  readonly snapshotRetentionMs?: number
  /**
   * The retention applies only to snapshots carrying every one of these
   * labels (default: every snapshot in the scope). For a provider's
   * sweep, which judges dead owners engine-wide but must not apply its own
   * retention to other hosts' snapshots. Checked like `labels`.
   */
  readonly snapshotRetentionLabels?: Readonly<Record<string, string>>
  /**
   * Collects only what carries every one of these labels, as a provider's
   * `labels` config puts them on all it makes (containers, volumes,
   * networks, snapshot images, memory checkpoints by their owner files,
   * named volumes and their use records): for a
   * host sharing an engine with others that collects its own resources and
   * nothing else. What no provider labels is then left to an unscoped run:
   * agent runtimes, and the memory checkpoints and containerd's copies of
   * snapshots not in the scope. Keys and values as Docker labels take them;
   * a key that is empty or holds `=` or white space is refused with
   * `SandboxConfigValidationError`.
   */
  readonly labels?: Readonly<Record<string, string>>
  /**
   * Stops the collection between two removals (a removal already sent goes
   * on) and cuts off a listing in progress; the collection then rejects.
   */
  readonly signal?: AbortSignal
}

/**
 * A detached sandbox (`cordon.detached=1`) outlives its owner by design: it
 * stays, whether its owner lives or not, until its end time
 * (`cordon.expires`), and goes once that has passed (its agent ends it
 * then; this removes one that could not end, e.g. paused).
 *
 * Removes what cordon created for owners that are gone: containers, volumes and
 * networks labelled `cordon.managed=1` whose owner process no longer runs (as
 * judgeOwner decides: only for an owner in this process's own boot, PID and
 * time namespace), or whose lifetime (`cordon.expires`, written at create)
 * has passed and whose owner is not known to be alive. A live owner's
 * resources are never touched (it ends its sandboxes at their lifetime,
 * which a pause moves later than the label says), and neither are those of
 * an owner this process cannot judge unless they have expired. Containers go first so that
 * their volumes and networks are free to remove. Agent runtime volumes, which
 * no one owns, go when nothing uses them (runtime-garbage.ts).
 */
export async function collectGarbage(options: CollectGarbageOptions): Promise<GarbageReport> {
  try {
    return await collect(options)
  } catch (error) {
    if (options.signal?.aborted)
      throw new SandboxAbortedError('collect garbage', { cause: options.signal.reason })
    throw translateEngineError(
      error,
      'container:docker',
      options.engine ?? 'the configured address',
      'collect garbage',
    )
  }
}

/**
 * The scope's labels as the engine's label filters (`key=value`, all of
 * which must match), checked first: a key the filter would read differently
 * than it was meant would widen the scope, not narrow it.
 */
function scopeFilters(labels: Readonly<Record<string, string>> | undefined): string[] {
  const entries = Object.entries(labels ?? {})
  const issues = entries.flatMap(([key, value]) =>
    key === '' || /[=\s]/.test(key)
      ? [
          {
            path: `labels.${key}`,
            message: 'a label key must be non-empty, without "=" or white space',
          },
        ]
      : typeof value !== 'string'
        ? [{ path: `labels.${key}`, message: 'a label value must be a string' }]
        : [],
  )
  if (issues.length > 0)
    throw new SandboxConfigValidationError('garbage collection options', issues)
  return entries.map(([key, value]) => `${key}=${value}`)
}

async function collect(options: CollectGarbageOptions): Promise<GarbageReport> {
  const { docker } = options
  const now = options.now ?? Date.now()
  const scope = scopeFilters(options.labels)
  scopeFilters(options.snapshotRetentionLabels)
  const scoped = scope.length > 0
  const filters = { label: [`${LABEL.managed}=1`, ...scope] }
  const listing = options.signal ? { abortSignal: options.signal } : {}
  const unjudged: UnjudgedResource[] = []
  const detachedKept: string[] = []
  const report: GarbageReport = {
    detachedKept,
    containers: [],
    images: [],
    checkpoints: [],
    checkpointCopies: [],
    volumes: [],
    networks: [],
    kept: 0,
    snapshotsWithinRetention: 0,
    unjudged,
    failed: [],
    namedVolumes: [],
  }
  // One resource that cannot go (in use, or being removed by someone else) does not stop the rest.
  const remove = async (id: string, operation: () => Promise<unknown>): Promise<void> => {
    options.signal?.throwIfAborted()
    try {
      await operation()
    } catch (error) {
      if (isNotFound(error) || isBeingRemoved(error)) return
      report.failed.push({ id, reason: (error as Error).message })
    }
  }
  const isGarbage = (
    kind: UnjudgedResource['kind'],
    id: string,
    labels: Record<string, string> | undefined,
  ): boolean => {
    if (!labels || labels[LABEL.role] === 'runtime') return false
    // Named volumes outlive their owners on purpose: only their retention removes them (below).
    if (labels[LABEL.role] === 'volume' || labels[LABEL.role] === 'volume-use') return false
    const expires = Number(labels[LABEL.expires])
    const hasExpiry = Number.isFinite(expires) && expires > 0
    if (labels[LABEL.detached] === '1') {
      // Made to outlive its owner: kept until its end, whoever is alive, and removed past it.
      // (A detached sandbox's agent ends it at its lifetime; this catches one that could not.)
      return !hasExpiry || expires < now
    }
    const owner = judgeOwner(labels)
    // A live owner ends its sandboxes at their lifetime itself, and knows what
    // the label cannot: a pause moves a lifetime's end later by the time paused.
    if (hasExpiry && expires < now && owner.state !== 'alive') return true
    if (owner.state === 'unknown') unjudged.push({ kind, id, reason: owner.reason })
    return owner.state === 'gone'
  }

  // A build under way (its record's owner alive, or not judged) may be between two steps,
  // its last step's image not yet in use: no build step image or container goes meanwhile.
  const buildRecords = await docker.listVolumes({
    filters: { label: [...filters.label, `${LABEL.role}=${BUILD_RECORD_ROLE}`] },
    ...listing,
  })
  const buildsUnderWay = (buildRecords.Volumes ?? []).some(
    (volume) => judgeOwner((volume.Labels as Record<string, string> | null) ?? {}).state !== 'gone',
  )
  for (const info of await docker.listContainers({ all: true, filters, ...listing })) {
    if (info.Labels?.[LABEL.role] === 'runtime') continue
    // A step container has its image's labels, not an owner's: whether a build is under way decides.
    const buildStep = info.Labels?.[LABEL.role] === BUILD_STEP_ROLE
    if (buildStep ? buildsUnderWay : !isGarbage('container', info.Id, info.Labels)) {
      ;(report as { kept: number }).kept++
      const detachedId = info.Labels?.[LABEL.detached] === '1' && info.Labels[LABEL.sandbox]
      if (detachedId) detachedKept.push(detachedId)
      continue
    }
    report.containers.push(info.Id)
    if (!options.dryRun)
      await remove(info.Id, async () => {
        const container = docker.getContainer(info.Id)
        // A paused sandbox is thawed first: gVisor cannot kill one that is paused.
        if (info.State === 'paused') await container.unpause().catch(() => {})
        await container.remove({ force: true, v: true })
      })
  }
  // After the sandboxes above, which may have been the last to mount a runtime.
  // Runtimes are shared by every provider and carry no one's labels: not in any scope.
  const runtimes = scoped
    ? { containers: [], volumes: [], kept: 0 }
    : await findRuntimeGarbage(docker, now)
  for (const id of runtimes.containers) {
    report.containers.push(id)
    if (!options.dryRun)
      await remove(id, () => docker.getContainer(id).remove({ force: true, v: true }))
  }
  const volumes = (await docker.listVolumes({ filters, ...listing })).Volumes ?? []
  for (const volume of volumes) {
    const role = (volume.Labels as Record<string, string> | null)?.[LABEL.role]
    if (role === 'runtime' || role === 'volume' || role === 'volume-use') continue
    if (!isGarbage('volume', volume.Name, volume.Labels as Record<string, string> | undefined)) {
      ;(report as { kept: number }).kept++
      continue
    }
    report.volumes.push(volume.Name)
    if (!options.dryRun)
      await remove(volume.Name, () => docker.getVolume(volume.Name).remove({ force: true }))
  }
  ;(report as { kept: number }).kept += runtimes.kept
  for (const name of runtimes.volumes) {
    report.volumes.push(name)
    // Not forced: a container that mounted it meanwhile keeps it.
    if (!options.dryRun) await remove(name, () => docker.getVolume(name).remove())
  }
  // Snapshots outlive their owner by design: only their age (or their host's removal) decides,
  // except a fork's own snapshot, which goes with its owner.
  const retentionMs = options.snapshotRetentionMs ?? DEFAULT_SNAPSHOT_RETENTION_MS
  const retentionScope = Object.entries(options.snapshotRetentionLabels ?? {})
  const snapshots = await docker.listImages({
    filters: { label: [`${LABEL.managed}=1`, `${LABEL.role}=snapshot`, ...scope] },
    ...listing,
  })
  /** With a scope, the snapshots within it: only their checkpoints are looked at. */
  const scopedSnapshots = scoped
    ? new Set(snapshots.flatMap((image) => image.Labels?.[SNAPSHOT_LABEL.id] ?? []))
    : undefined
  /** The snapshots whose records go in this run: their checkpoints go too, however recent. */
  const goneSnapshots = new Set<string>()
  for (const image of snapshots) {
    const tags = (image.RepoTags ?? []).filter((tag) => tag !== '<none>:<none>')
    const createdAt = Number(image.Labels?.[SNAPSHOT_LABEL.createdAt])
    const retained = retentionScope.every(([key, value]) => image.Labels?.[key] === value)
    const expired = retained && (!Number.isFinite(createdAt) || createdAt + retentionMs < now)
    // A fork's own snapshot was only ever its host's to remove: a dead host leaves it to this.
    const abandonedFork =
      image.Labels?.[SNAPSHOT_LABEL.fork] === '1' && judgeOwner(image.Labels).state === 'gone'
    if (tags.length > 0 && !expired && !abandonedFork) {
      ;(report as { kept: number }).kept++
      ;(report as { snapshotsWithinRetention: number }).snapshotsWithinRetention++
      continue
    }
    const snapshotId = image.Labels?.[SNAPSHOT_LABEL.id]
    if (snapshotId) goneSnapshots.add(snapshotId)
    if (options.dryRun) {
      report.images.push(image.Id)
      continue
    }
    options.signal?.throwIfAborted()
    try {
      // Untagged first: no new sandbox starts from it, whatever happens next.
      for (const tag of tags) await docker.getImage(tag).remove({ force: true })
      await docker.getImage(image.Id).remove()
      report.images.push(image.Id)
    } catch (error) {
      if (isNotFound(error)) report.images.push(image.Id)
      // In use by a running sandbox made from it: that sandbox removes it as it goes.
      else (report as { kept: number }).kept++
    }
  }
  await collectBuildSteps(options, report, filters.label, buildsUnderWay)
  options.signal?.throwIfAborted()
  await collectCheckpoints(docker, options, report, goneSnapshots, now, scopedSnapshots)
  await collectNamedVolumes(options, now, report, remove, scope)
  for (const network of await docker.listNetworks({ filters, ...listing })) {
    if (!isGarbage('network', network.Id, network.Labels)) {
      ;(report as { kept: number }).kept++
      continue
    }
    report.networks.push(network.Id)
    if (!options.dryRun) await remove(network.Id, () => docker.getNetwork(network.Id).remove())
  }
  return report
}

/**
 * The images of the steps of builds that did not finish (their host was
 * killed): untagged, labelled as a build's steps (build-stage-labels.ts),
 * and with no image built on them that is not itself such garbage. The
 * steps of a finished build stay: its image is built on them (they are
 * the engine's cache for the next build). Left alone while a build in the
 * scope is under way; the images go newest first, each before the one it
 * was built on, never pruning further (a base image is never touched).
 */
async function collectBuildSteps(
  options: CollectGarbageOptions,
  report: GarbageReport,
  scope: readonly string[],
  buildsUnderWay: boolean,
): Promise<void> {
  const { docker } = options
  const listing = options.signal ? { abortSignal: options.signal } : {}
  const steps = await docker.listImages({
    all: true,
    filters: { label: [...scope, `${LABEL.role}=${BUILD_STEP_ROLE}`] },
    ...listing,
  })
  const untagged = (image: Docker.ImageInfo): boolean =>
    (image.RepoTags ?? []).every((tag) => tag === '<none>:<none>')
  const candidates = new Set(buildsUnderWay ? [] : steps.filter(untagged).map((image) => image.Id))
  if (candidates.size > 0) {
    // Every image, whoever made it: one built on a candidate keeps it.
    const children = new Map<string, string[]>()
    for (const image of await docker.listImages({ all: true, ...listing }))
      if (image.ParentId)
        children.set(image.ParentId, [...(children.get(image.ParentId) ?? []), image.Id])
    for (let changed = true; changed; ) {
      changed = false
      for (const id of candidates)
        if ((children.get(id) ?? []).some((child) => !candidates.has(child))) {
          candidates.delete(id)
          changed = true
        }
    }
  }
  ;(report as { kept: number }).kept += steps.length - candidates.size
  const newestFirst = steps
    .filter((image) => candidates.has(image.Id))
    .sort((a, b) => b.Created - a.Created)
  for (let pending = newestFirst, progress = true; pending.length > 0 && progress; ) {
    progress = false
    const left: Docker.ImageInfo[] = []
    for (const image of pending) {
      if (options.dryRun) {
        report.images.push(image.Id)
        continue
      }
      options.signal?.throwIfAborted()
      try {
        await docker.getImage(image.Id).remove({ noprune: true })
        report.images.push(image.Id)
        progress = true
      } catch (error) {
        if (isNotFound(error)) {
          report.images.push(image.Id)
          progress = true
        } else left.push(image)
      }
    }
    // One made in the same second as its child may come first: it goes in the next pass.
    pending = left
    if (!progress)
      for (const image of left)
        report.failed.push({ id: image.Id, reason: 'in use, or an image is built on it' })
  }
}

/**
 * Named volumes: each is listed; one that no live sandbox mounts and that
 * was last used longer than `volumeRetentionMs` ago is removed with its use
 * records, and so are use records whose volume is gone.
 */
async function collectNamedVolumes(
  options: CollectGarbageOptions,
  now: number,
  report: GarbageReport,
  remove: (id: string, operation: () => Promise<unknown>) => Promise<void>,
  scope: readonly string[],
): Promise<void> {
  const { docker } = options
  const volumes = new DockerVolumes({
    docker,
    backend: 'container:docker',
    engine: options.engine ?? 'the configured address',
    labels: () => ({}),
  })
  const retention = options.volumeRetentionMs
  const named: Array<SandboxVolumeInfo & { removed: boolean }> = []
  const listed = await volumes.listVolumes(now, scope)
  for (const volume of listed) {
    const expired =
      retention !== undefined && volume.usedBy.length === 0 && now - volume.lastUsedAt > retention
    named.push({ ...volume, removed: expired })
    if (!expired) {
      ;(report as { kept: number }).kept++
      continue
    }
    const engineName = engineVolumeName(volume.name)
    report.volumes.push(engineName)
    if (!options.dryRun) {
      // Not forced: a sandbox that mounted it since the listing keeps it.
      await remove(engineName, () => docker.getVolume(engineName).remove())
      await volumes.removeUseRecords(volume.name, () => true)
    }
  }
  const present = new Set(listed.map((volume) => volume.name))
  if (!options.dryRun)
    for (const [name] of await volumes.useRecords(scope))
      if (!present.has(name)) await volumes.removeUseRecords(name, () => true)
  ;(report as unknown as { namedVolumes: typeof named }).namedVolumes = named
}

/** How old a checkpoint without a record must be before it is taken for garbage: 10 minutes. */
const CHECKPOINT_GRACE_MS = 10 * 60 * 1000

/**
 * A memory snapshot's checkpoint lives as long as its record (a snapshot
 * image, collected above): a checkpoint whose snapshot has no tagged image
 * left, or whose image is past the retention, goes. One with no record at
 * all goes once its owner (its owner file, checkpoint-owner.ts) is gone, or
 * after a grace. A sandbox started from it has its own copy in its
 * container's directory. With a scope, a checkpoint is in it by its
 * snapshot's image or, without one, by its owner file's labels.
 */
async function collectCheckpoints(
  docker: Docker,
  options: CollectGarbageOptions,
  report: GarbageReport,
  goneSnapshots: ReadonlySet<string>,
  now: number,
  scopedSnapshots: ReadonlySet<string> | undefined,
): Promise<void> {
  const rootDir = await engineRootDir(docker)
  if (!rootDir) return
  const recorded = new Set((await listSnapshots(docker)).map((snapshot) => snapshot.id))
  const scope = Object.entries(options.labels ?? {})
  for (const id of listMemoryCheckpoints(rootDir)) {
    // Whose it is: its snapshot's image says, and before that image exists, its owner file.
    const owner = checkpointOwner(rootDir, id)
    const inScope =
      !scopedSnapshots ||
      scopedSnapshots.has(id) ||
      (owner !== undefined && scope.every(([key, value]) => owner[key] === value))
    if (!inScope) continue
    report.checkpointCopies.push(
      ...(await sweepContainerdCopies(rootDir, id, options.dryRun === true)),
    )
    const gone = goneSnapshots.has(id)
    if (!gone && recorded.has(id)) continue
    // One being taken now has no record yet: unless its owner is known to be gone,
    // a recent one without a record is left to a later run.
    const ownerGone = owner !== undefined && judgeOwner(owner).state === 'gone'
    if (!gone && !ownerGone && checkpointAgeMs(rootDir, id, now) < CHECKPOINT_GRACE_MS) continue
    report.checkpoints.push(id)
    if (!options.dryRun) removeMemoryCheckpoint(rootDir, id)
  }
}
