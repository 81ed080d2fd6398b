import { PassThrough } from 'node:stream'
import type { AgentClient } from '@cordon/agent/sandbox'
import {
  isSnapshotId,
  type ResolvedContainerSandboxLayout,
  type SandboxBackendEnforcement,
  SandboxControlRefusedError,
  SandboxOperationError,
  type SandboxSnapshot,
  SandboxSnapshotNotFoundError,
} from '@cordon/core'
import { LABEL, newSnapshotId, planLayoutMounts } from '@cordon/core/backend'
import type Docker from 'dockerode'
import type { AgentRuntime } from './agent-runtime.js'
import { removeContainerAndWait } from './container-removal.js'
import { isNotFound } from './engine-errors.js'
import { checkedSnapshotArchive } from './snapshot-archive.js'
import { CAPTURE_SCRIPT, RESTORE_SCRIPT } from './snapshot-scripts.js'

/** The repository of every snapshot image; its tag is the snapshot's id. */
export const SNAPSHOT_REPOSITORY = 'cordon-snapshot'
/** Where a snapshot's files sit in its image: `/.cordon-snapshot/<id>`. */
export const SNAPSHOT_DIRECTORY = '/.cordon-snapshot'

/** The labels a snapshot image (and the helper container that makes it) carries, beside the owner's. */
export const SNAPSHOT_LABEL = {
  id: 'cordon.snapshot',
  createdAt: 'cordon.snapshot.created',
  bytes: 'cordon.snapshot.bytes',
  memory: 'cordon.snapshot.memory',
  backend: 'cordon.snapshot.backend',
  base: 'cordon.snapshot.base',
  roots: 'cordon.snapshot.roots',
  limits: 'cordon.snapshot.limits',
  egress: 'cordon.snapshot.egress',
  /** A memory snapshot's user (`uid:gid`): its processes keep it in every sandbox restored from it. */
  user: 'cordon.snapshot.user',
  /**
   * `1` on a snapshot `fork()` took for itself, which its host removes once
   * the forks are made: one whose owner is gone is garbage, however recent.
   */
  fork: 'cordon.snapshot.fork',
} as const

/** A snapshot as the engine keeps it. */
export interface StoredSnapshot extends SandboxSnapshot {
  /** The image a sandbox made from it runs: `cordon-snapshot:<id>`. */
  readonly image: string
  /** The image the snapshot's first sandbox ran, which every later snapshot of its line builds on. */
  readonly baseImage: string
  /** The directories whose files it holds, as the sandbox saw them. */
  readonly roots: readonly string[]
  /** The image's id (it outlives its tag while a sandbox made from it runs). */
  readonly imageId: string
  /** A memory snapshot's user: the one its processes run as. */
  readonly user?: { readonly uid: number; readonly gid: number }
}

/**
 * The directories a snapshot captures: the writable tmpfs ones, `/tmp` and
 * every writable `ephemeral` layout mount. A host directory is the host's
 * and is not copied; a read-only mount holds nothing the sandbox wrote.
 */
export function snapshotRoots(layout: ResolvedContainerSandboxLayout): string[] {
  return [
    '/tmp',
    ...planLayoutMounts(layout)
      .filter((mount) => !mount.readOnly && mount.source.type === 'ephemeral')
      .map((mount) => mount.containerPath),
  ]
}

export function snapshotImage(id: string): string {
  return `${SNAPSHOT_REPOSITORY}:${id}`
}

/** What a running sandbox's snapshot needs to know about it. */
export interface SnapshotSource {
  readonly docker: Docker
  readonly backend: string
  readonly containerId: string
  readonly sandboxId: string
  readonly runtime: AgentRuntime
  /** The sandbox's agent, which starts the capture as it starts the sandbox's commands. */
  readonly agent: AgentClient
  readonly user: { readonly uid: number; readonly gid: number }
  /** The writable tmpfs directories to capture (`/tmp` and the ephemeral layout mounts). */
  readonly roots: readonly string[]
  readonly baseImage: string
  readonly enforcement: SandboxBackendEnforcement
  /** The owner labels every resource carries. */
  readonly ownerLabels: Readonly<Record<string, string>>
  /** Taken by `fork()` for its own use (`SNAPSHOT_LABEL.fork`). */
  readonly forFork?: boolean | undefined
  readonly signal?: AbortSignal | undefined
}

/**
 * The labels a snapshot's image carries: its owner's, its id and time, and
 * what a sandbox made from it takes over (limits, egress policy, roots and,
 * for a memory snapshot, the user its processes run as).
 */
export function snapshotLabels(
  source: Pick<
    SnapshotSource,
    | 'ownerLabels'
    | 'sandboxId'
    | 'backend'
    | 'baseImage'
    | 'roots'
    | 'enforcement'
    | 'user'
    | 'forFork'
  >,
  id: string,
  createdAt: number,
  memory: boolean,
): {
  labels: Record<string, string>
  limits: StoredSnapshot['limits']
  egress: StoredSnapshot['egress']
} {
  const limits = {
    ...(source.enforcement.limits.memoryLimitMb !== undefined
      ? { memoryLimitMb: source.enforcement.limits.memoryLimitMb }
      : {}),
    ...(source.enforcement.limits.maxProcesses !== undefined
      ? { maxProcesses: source.enforcement.limits.maxProcesses }
      : {}),
  }
  const egress = {
    kind: source.enforcement.egress.kind,
    ...(source.enforcement.egress.allowedHosts
      ? { allowedHosts: [...source.enforcement.egress.allowedHosts] }
      : {}),
  }
  const labels: Record<string, string> = {
    ...source.ownerLabels,
    [LABEL.role]: 'snapshot',
    [LABEL.sandbox]: source.sandboxId,
    [SNAPSHOT_LABEL.id]: id,
    [SNAPSHOT_LABEL.createdAt]: String(createdAt),
    [SNAPSHOT_LABEL.memory]: memory ? '1' : '0',
    [SNAPSHOT_LABEL.backend]: source.backend,
    [SNAPSHOT_LABEL.base]: source.baseImage,
    [SNAPSHOT_LABEL.roots]: JSON.stringify(source.roots),
    [SNAPSHOT_LABEL.limits]: JSON.stringify(limits),
    [SNAPSHOT_LABEL.egress]: JSON.stringify(egress),
    ...(memory ? { [SNAPSHOT_LABEL.user]: `${source.user.uid}:${source.user.gid}` } : {}),
    ...(source.forFork ? { [SNAPSHOT_LABEL.fork]: '1' } : {}),
  }
  return { labels, limits, egress }
}

/**
 * The most bytes a snapshot's tar may hold: twice the size of the tmpfs
 * directories it captures, plus 1 MiB for the manifest and headers of a
 * sandbox with little in it. A tmpfs takes a sparse file of any length and
 * a hard link costs it nothing, but the capture writes both out in full, so
 * without a bound a sandbox with 64 MiB of `/tmp` could fill the host's
 * disk through its snapshot image (`truncate -s 1T /tmp/f`). The sizes are
 * read from the engine's record of the container's tmpfs mounts, not from
 * anything the sandbox says; a root without one counts for nothing.
 */
export function snapshotByteLimit(
  tmpfs: Readonly<Record<string, string>> | undefined,
  roots: readonly string[],
): number {
  let capacity = 0
  for (const root of roots) {
    const size = /(?:^|,)size=(\d+)(?:,|$)/.exec(tmpfs?.[root] ?? '')?.[1]
    if (size) capacity += Number(size)
  }
  return 2 * capacity + 1024 * 1024
}

/**
 * Captures the sandbox's writable tmpfs directories into a new local image:
 * the capture program (snapshot-scripts.ts) streams them as a tar, which is
 * written into a container made (never started) from the sandbox's base
 * image, and that container is committed as `cordon-snapshot:<id>`. The
 * helper container goes whatever happens; the image exists only if every
 * step succeeded.
 */
export async function takeFilesystemSnapshot(source: SnapshotSource): Promise<StoredSnapshot> {
  const { docker } = source
  const id = newSnapshotId()
  const createdAt = Date.now()
  const { labels, limits, egress } = snapshotLabels(source, id, createdAt, false)
  const signal = source.signal
  const removeImage = () =>
    docker
      .getImage(snapshotImage(id))
      .remove({ force: true })
      .catch(() => {})
  try {
    return await capture()
  } catch (error) {
    await removeImage()
    throw error
  }

  async function capture(): Promise<StoredSnapshot> {
    // The two calls that make something on the engine (this create and the
    // commit) are not cut off by the signal, which is looked at once each
    // returns: a call cut off on the client goes on in the engine and can
    // land after the snapshot was given up, leaving what it made behind
    // (seen on a busy engine: the helper listed, not yet removable by name).
    const helper = await docker.createContainer({
      name: `cordon-snapshot-${id}`,
      Image: source.baseImage,
      Entrypoint: ['/.cordon-snapshot-is-never-run'],
      Cmd: [],
      Labels: labels,
      NetworkDisabled: true,
      HostConfig: { NetworkMode: 'none', LogConfig: { Type: 'none', Config: {} } },
    })
    let failed = false
    try {
      signal?.throwIfAborted()
      const inspected = await docker.getContainer(source.containerId).inspect()
      const limit = snapshotByteLimit(inspected.HostConfig?.Tmpfs, source.roots)
      const tar = new PassThrough()
      // Checked here, on the host: the capture runs inside the sandbox and
      // its output is the sandbox's to shape. A refused archive closes the
      // capture's stream (which ends its exec) and cuts the engine's upload
      // off; the refusal is what this snapshot then reports.
      const upload = new AbortController()
      const uploadSignal = signal ? AbortSignal.any([signal, upload.signal]) : upload.signal
      const checked = checkedSnapshotArchive(`.cordon-snapshot/${id}`, source.roots, limit, () => {
        tar.destroy()
        upload.abort()
      })
      tar.pipe(checked.input)
      const refusal = () =>
        new SandboxControlRefusedError('snapshot', source.backend, checked.refusal() ?? '')
      const captured = runInSandbox(
        source,
        ['-e', CAPTURE_SCRIPT, `.cordon-snapshot/${id}`, ...source.roots],
        tar,
      )
      const [result] = await Promise.all([
        captured,
        helper.putArchive(checked.output as unknown as string, {
          path: '/',
          abortSignal: uploadSignal,
        }),
      ]).catch((error: unknown) => {
        // Whichever side failed, the other stops: the capture's stream closes.
        tar.destroy()
        throw checked.refusal() !== undefined ? refusal() : error
      })
      if (checked.refusal() !== undefined) throw refusal()
      if (result.exitCode !== 0)
        throw new SandboxOperationError(
          'snapshot',
          `capturing the sandbox's files failed (exit ${result.exitCode}): ${result.stderr.trim().slice(0, 500)}`,
        )
      // The host's own count: the capture's stderr is the sandbox's to write to.
      const bytes = checked.streamedBytes()
      signal?.throwIfAborted()
      const committed = await helper.commit({
        repo: SNAPSHOT_REPOSITORY,
        tag: id,
        pause: false,
        changes: `LABEL ${SNAPSHOT_LABEL.bytes}=${bytes}`,
      })
      // Given up while it committed: the image is removed by the caller's catch.
      signal?.throwIfAborted()
      return {
        id,
        createdAt,
        sizeBytes: bytes,
        memory: false,
        backend: source.backend,
        sourceSandboxId: source.sandboxId,
        limits,
        egress,
        image: snapshotImage(id),
        baseImage: source.baseImage,
        roots: [...source.roots],
        imageId: (committed as { Id?: string }).Id ?? '',
      }
    } catch (error) {
      failed = true
      throw error
    } finally {
      // A helper the engine would not remove fails a snapshot that had
      // succeeded; after a failure, that failure is the one reported (the
      // helper is labelled, and gc removes it).
      await removeContainerAndWait(helper).catch((error: unknown) => {
        if (!failed) throw error
      })
    }
  }
}

/**
 * Runs the runtime's Node inside the sandbox the way the sandbox's own
 * commands run: started by its agent, as its user, under the launcher's
 * system call filter where the runtime holds one, with no capabilities (the
 * agent sets the user from root, which clears them), its stdout into
 * `stdout`; resolves with its exit code and stderr. Not an engine exec naming the user: under gVisor the
 * first process of such an exec keeps the container's capabilities
 * (`CAP_DAC_OVERRIDE` among them) whatever user it runs as, so a capture
 * started that way read files the user cannot, and the new sandbox got them.
 * Closing `stdout` or the signal firing ends the program (the agent kills
 * its whole tree when its connection goes).
 */
export async function runInSandbox(
  source: Pick<SnapshotSource, 'agent' | 'runtime' | 'signal'>,
  nodeArgs: readonly string[],
  stdout: PassThrough,
): Promise<{ exitCode: number; stderr: string }> {
  const [program, ...args] = source.runtime.node(nodeArgs[0]!, ...nodeArgs.slice(1))
  let errorText = ''
  // A slow reader holds the agent's output back, not this process's memory.
  const deliver = (bytes: Uint8Array): Promise<void> | undefined => {
    if (stdout.destroyed || stdout.write(bytes)) return undefined
    return new Promise<void>((resolve) => {
      const done = (): void => {
        stdout.off('drain', done)
        stdout.off('close', done)
        resolve()
      }
      stdout.on('drain', done)
      stdout.on('close', done)
    })
  }
  let exitCode: number
  try {
    // Its own environment, not the sandbox's: nothing the image or the
    // create call set (NODE_OPTIONS) reaches the runtime's Node.
    const session = await source.agent.startExec(
      { command: program!, args, env: {}, cwd: '/', stdin: false },
      {
        onStdout: deliver,
        onStderr: (bytes) => {
          if (errorText.length < 64 * 1024) errorText += Buffer.from(bytes).toString('utf8')
        },
      },
      source.signal,
    )
    const stop = (): void => session.abandon()
    source.signal?.addEventListener('abort', stop, { once: true })
    stdout.once('close', stop)
    // Refused while the agent was starting it: nothing more is wanted.
    if (stdout.destroyed) stop()
    try {
      exitCode = (await session.result).exitCode
    } finally {
      source.signal?.removeEventListener('abort', stop)
      stdout.off('close', stop)
    }
  } catch (error) {
    // Cut off by the signal: the abort is what the caller reports.
    source.signal?.throwIfAborted()
    throw error
  }
  source.signal?.throwIfAborted()
  stdout.end()
  return { exitCode, stderr: errorText }
}

/**
 * Lays a snapshot's files out again in a new sandbox, as its user, before
 * it is handed out.
 */
export async function restoreFilesystemSnapshot(
  target: Pick<SnapshotSource, 'agent' | 'runtime' | 'signal'>,
  snapshot: StoredSnapshot,
): Promise<void> {
  const sink = new PassThrough()
  sink.resume()
  const result = await runInSandbox(
    target,
    ['-e', RESTORE_SCRIPT, `${SNAPSHOT_DIRECTORY}/${snapshot.id}`],
    sink,
  )
  if (result.exitCode !== 0)
    throw new SandboxOperationError(
      'create',
      `restoring snapshot ${snapshot.id} failed (exit ${result.exitCode}): ${result.stderr.trim().slice(0, 500)}`,
    )
}

/** A snapshot image's labels as a {@link StoredSnapshot}, or undefined for an image that is not one. */
export function storedSnapshot(
  labels: Readonly<Record<string, string>> | undefined | null,
  imageId: string,
): StoredSnapshot | undefined {
  if (labels?.[LABEL.role] !== 'snapshot' || labels[LABEL.managed] !== '1') return undefined
  const id = labels[SNAPSHOT_LABEL.id]
  if (!isSnapshotId(id)) return undefined
  const user = /^(\d+):(\d+)$/.exec(labels[SNAPSHOT_LABEL.user] ?? '')
  const parse = <T>(text: string | undefined, fallback: T): T => {
    try {
      return text === undefined ? fallback : (JSON.parse(text) as T)
    } catch {
      return fallback
    }
  }
  return {
    id,
    createdAt: Number(labels[SNAPSHOT_LABEL.createdAt] ?? 0),
    sizeBytes: Number(labels[SNAPSHOT_LABEL.bytes] ?? 0),
    memory: labels[SNAPSHOT_LABEL.memory] === '1',
    backend: labels[SNAPSHOT_LABEL.backend] ?? '',
    sourceSandboxId: labels[LABEL.sandbox] ?? '',
    limits: parse(labels[SNAPSHOT_LABEL.limits], {}),
    egress: parse(labels[SNAPSHOT_LABEL.egress], { kind: 'deny-all' as const }),
    image: snapshotImage(id),
    baseImage: labels[SNAPSHOT_LABEL.base] ?? '',
    roots: parse(labels[SNAPSHOT_LABEL.roots], [] as string[]),
    imageId,
    ...(user ? { user: { uid: Number(user[1]), gid: Number(user[2]) } } : {}),
  }
}

/** The snapshot `id` as the engine keeps it; `SandboxSnapshotNotFoundError` if it keeps none. */
export async function findSnapshot(
  docker: Docker,
  id: string,
  backend: string,
  signal?: AbortSignal,
): Promise<StoredSnapshot> {
  if (!isSnapshotId(id)) throw new SandboxSnapshotNotFoundError(id, backend)
  try {
    signal?.throwIfAborted()
    const image = await docker.getImage(snapshotImage(id)).inspect()
    const found = storedSnapshot(image.Config?.Labels, image.Id)
    if (!found || found.id !== id) throw new SandboxSnapshotNotFoundError(id, backend)
    return found
  } catch (error) {
    if (isNotFound(error)) throw new SandboxSnapshotNotFoundError(id, backend, { cause: error })
    throw error
  }
}

/** Every snapshot the engine keeps (tagged: not yet removed), oldest first. */
export async function listSnapshots(
  docker: Docker,
  signal?: AbortSignal,
): Promise<StoredSnapshot[]> {
  const images = await docker.listImages({
    filters: { label: [`${LABEL.managed}=1`, `${LABEL.role}=snapshot`] },
    ...(signal ? { abortSignal: signal } : {}),
  })
  return images
    .filter((image) =>
      (image.RepoTags ?? []).some((tag) => tag.startsWith(`${SNAPSHOT_REPOSITORY}:`)),
    )
    .flatMap((image) => {
      const found = storedSnapshot(image.Labels, image.Id)
      return found ? [found] : []
    })
    .sort((a, b) => a.createdAt - b.createdAt)
}

/**
 * Removes a snapshot's tag, so that no new sandbox starts from it; its
 * image goes now if no container uses it, else with the last sandbox that
 * does ({@link releaseSnapshotImage}) or at the next garbage collection.
 */
export async function removeSnapshot(
  docker: Docker,
  id: string,
  backend: string,
  signal?: AbortSignal,
): Promise<void> {
  const found = await findSnapshot(docker, id, backend, signal)
  try {
    await docker.getImage(found.image).remove({ force: true })
  } catch (error) {
    if (isNotFound(error)) throw new SandboxSnapshotNotFoundError(id, backend, { cause: error })
    throw error
  }
  await releaseSnapshotImage(docker, found.imageId)
}

/**
 * Removes an untagged snapshot image that no container uses any longer
 * (the last sandbox made from a removed snapshot calls it as it goes); an
 * image still tagged or still in use stays.
 */
export async function releaseSnapshotImage(docker: Docker, imageId: string): Promise<void> {
  try {
    const image = await docker.getImage(imageId).inspect()
    if ((image.RepoTags ?? []).length > 0) return
    if (!storedSnapshot(image.Config?.Labels, imageId)) return
    await docker.getImage(imageId).remove()
  } catch {
    // In use by another sandbox made from it, or gone already: the last one, or gc, removes it.
  }
}

/** What a host sees of a stored snapshot: the engine's own details (image, roots) stay inside. */
export function publicSnapshot(stored: StoredSnapshot): SandboxSnapshot {
  const {
    image: _image,
    baseImage: _base,
    roots: _roots,
    imageId: _id,
    user: _user,
    ...snapshot
  } = stored
  return snapshot
}

/**
 * The image a running sandbox's files were laid over: its container's own,
 * or, for a sandbox started from a snapshot's image, the image that snapshot
 * was taken over (its label), so that a snapshot of it is of the same base.
 */
export async function baseImageOf(
  docker: Docker,
  container: Pick<Docker.ContainerInspectInfo, 'Config' | 'Image'>,
): Promise<string> {
  const image = await docker
    .getImage(container.Image)
    .inspect()
    .catch(() => undefined)
  return image?.Config?.Labels?.[SNAPSHOT_LABEL.base] || container.Config.Image
}
