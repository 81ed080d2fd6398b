import {
  accessSync,
  constants,
  cpSync,
  existsSync,
  mkdirSync,
  readdirSync,
  rmSync,
  statSync,
} from 'node:fs'
import { join } from 'node:path'
import type { ResolvedContainerSandboxLayout } from '@cordon/core'
import { SandboxControlRefusedError, SandboxOperationError } from '@cordon/core'
import { planLayoutMounts } from '@cordon/core/backend'
import type Docker from 'dockerode'
import { withCheckpointHeadroom } from './checkpoint-headroom.js'
import {
  readCheckpointOwner,
  removeCheckpointOwner,
  writeCheckpointOwner,
} from './checkpoint-owner.js'
import { withStartLock } from './checkpoint-start-lock.js'
import {
  CHECKPOINT_IMAGE,
  findContainerdCopies,
  removeContainerdCopies,
} from './containerd-checkpoint-copies.js'
import {
  SNAPSHOT_REPOSITORY,
  type SnapshotSource,
  type StoredSnapshot,
  snapshotImage,
  snapshotLabels,
} from './filesystem-snapshot.js'

/** Why a detached sandbox's processes are not captured, wherever it is asked. */
export const DETACHED_MEMORY_SNAPSHOT_REFUSAL =
  'a detached sandbox is not checkpointed: its agent outlives its host by its own settings, which a sandbox restored from it would keep'

/**
 * Memory snapshots on the Docker Engine: the engine's checkpoint API
 * (experimental mode), under gVisor, which checkpoints a whole sandbox
 * (every process, its own kernel's state, the tmpfs directories) into a
 * directory of files.
 *
 * Where the data lives: the engine writes the checkpoint to
 * `<engine data directory>/cordon-checkpoints/<snapshot id>/` (root's, on
 * the engine's machine); a sandbox starts from it once it is copied into
 * that sandbox's container directory (`containers/<id>/checkpoints/<snapshot
 * id>`), because this engine takes no checkpoint directory on start. The
 * snapshot's record is an image labelled as cordon's like a filesystem
 * snapshot's (`cordon.snapshot.memory=1`): it is listed, removed and
 * collected past its retention the same way, and the checkpoint directory
 * goes with it (removeMemoryCheckpoint, and `cordon gc` for one whose
 * record is gone).
 */

/** The directory under the engine's data directory that holds every checkpoint cordon keeps. */
export const CHECKPOINT_DIRECTORY = 'cordon-checkpoints'

/** What the engine says about itself that a memory snapshot depends on. */
export interface CheckpointEngine {
  /** The engine's data directory (`docker info`'s `DockerRootDir`). */
  readonly rootDir: string
}

/**
 * Why a memory snapshot of this sandbox cannot be taken here, as a
 * `SandboxControlRefusedError` naming `snapshot.memory`; undefined with the
 * engine's details when it can. Checked before the sandbox is touched, so a
 * refusal leaves it running as it was.
 */
export async function checkMemorySnapshot(
  docker: Pick<Docker, 'version' | 'info'>,
  sandbox: {
    readonly backend: string
    readonly runtime: 'runc' | 'runsc'
    readonly detached: boolean
    readonly layout: ResolvedContainerSandboxLayout
    readonly engineIsLocal: boolean
  },
): Promise<CheckpointEngine> {
  const refuse = (reason: string): never => {
    throw new SandboxControlRefusedError('snapshot.memory', sandbox.backend, reason)
  }
  if (sandbox.runtime !== 'runsc') refuse(RUNC_MEMORY_SNAPSHOT_REFUSAL)
  if (sandbox.detached) refuse(DETACHED_MEMORY_SNAPSHOT_REFUSAL)
  const shared = planLayoutMounts(sandbox.layout).filter(
    (mount) => !mount.readOnly && mount.source.type !== 'ephemeral',
  )
  if (shared.length > 0)
    refuse(
      `${shared.map((mount) => mount.containerPath).join(', ')} ${shared.length === 1 ? 'is a' : 'are'} writable host directory or volume mount${shared.length === 1 ? '' : 's'}: a checkpoint holds the sandbox's memory, not those files, and sandboxes restored from it would share them writable`,
    )
  if (!sandbox.engineIsLocal)
    refuse(
      "the engine is not on this machine: a checkpoint is placed in the new sandbox's container directory on the engine's own disk",
    )
  const version = (await docker.version()) as { Experimental?: boolean }
  if (version.Experimental !== true)
    refuse(
      'the engine\'s experimental mode is off, and its checkpoint API (checkpoint create, start from a checkpoint) exists only in experimental mode; set "experimental": true in the engine\'s daemon.json (tooling/engine/setup.sh does) and restart it',
    )
  const rootDir = ((await docker.info()) as { DockerRootDir?: string }).DockerRootDir
  if (!rootDir) return refuse('the engine does not say where its data directory is')
  try {
    accessSync(join(rootDir, 'containers'), constants.W_OK)
  } catch {
    refuse(
      `the engine's data directory ${rootDir} is not writable by this host process: a checkpoint is copied into the new sandbox's container directory there (run the host as root on the engine's machine)`,
    )
  }
  return { rootDir }
}

/**
 * Under runc a checkpoint needs CRIU. Tried on this project's machines
 * (Debian's criu 3.17.1): `criu check` cannot start ("vdso: Failed to fill
 * self vdso symtable", kernel feature detection fails), and the engine's
 * checkpoint of a plain, unhardened runc container fails the same way, so
 * cordon's hardened ones (seccomp, no capabilities, read-only root, tmpfs
 * mounts) were never reached. Refused rather than tried on every call.
 */
export const RUNC_MEMORY_SNAPSHOT_REFUSAL =
  "runc checkpoints a container with CRIU, and CRIU cannot checkpoint on this engine's kernel (criu 3.17: \"vdso: Failed to fill self vdso symtable\", even for an unhardened container); use runtime 'runsc' (gVisor), which checkpoints the whole sandbox itself"

/** The lock a start from snapshot `id`'s checkpoint holds (beside it: not a checkpoint's name). */
function startLockPath(engine: CheckpointEngine, id: string): string {
  return `${checkpointPath(engine, id)}.start-lock`
}

/** Where the engine keeps snapshot `id`'s checkpoint. */
export function checkpointPath(engine: CheckpointEngine, id: string): string {
  return join(engine.rootDir, CHECKPOINT_DIRECTORY, id)
}

/**
 * Checkpoints the container's processes into the snapshot's directory; the
 * container stops (this runsc cannot leave it running), and its engine
 * removes it (it is `AutoRemove`).
 */
export async function checkpointContainer(
  docker: Docker,
  engine: CheckpointEngine,
  containerId: string,
  id: string,
  signal?: AbortSignal,
): Promise<void> {
  mkdirSync(join(engine.rootDir, CHECKPOINT_DIRECTORY), { recursive: true, mode: 0o700 })
  const container = docker.getContainer(containerId) as Docker.Container & {
    createCheckpoint(options: Record<string, unknown>): Promise<unknown>
  }
  await withCheckpointHeadroom(docker, containerId, () =>
    container.createCheckpoint({
      CheckpointID: id,
      CheckpointDir: join(engine.rootDir, CHECKPOINT_DIRECTORY),
      Exit: true,
      ...(signal ? { abortSignal: signal } : {}),
    }),
  ).catch((error: unknown) => {
    throw explainCheckpointFailure(error)
  })
}

/**
 * This runsc cannot save a TCP socket that something waits on ("endpoint
 * still has waiters upon save"), and a listening server, or a connection a
 * process reads, always is one; the failed save then ends the whole
 * sandbox. So the agent is asked to refuse the suspend while the sandbox
 * holds TCP sockets in use, and that refusal becomes this one, before the
 * sandbox is touched (a fork that did not ask for memory then copies files).
 */
export function refusedForOpenSockets(error: unknown, backend: string): unknown {
  if (
    !SandboxControlRefusedError.isInstance(error) ||
    !/holds TCP sockets in use/.test(error.reason)
  )
    return error
  return new SandboxControlRefusedError(
    'snapshot.memory',
    backend,
    `gVisor (this runsc) cannot checkpoint a TCP socket in use, and ${error.reason.replace(/^the sandbox/, 'this sandbox')}; stop what holds them (a server, an open connection), or take snapshot({ memory: false }), which keeps the files`,
    { cause: error },
  )
}

/**
 * The engine's answer when runsc could not save the sandbox, said in terms
 * of what the sandbox runs, for a socket that became busy after the agent
 * looked. Anything else is passed on as the engine said it.
 */
export function explainCheckpointFailure(error: unknown): unknown {
  const message = String((error as Error)?.message ?? error)
  if (/containerManager\.Checkpoint" failed: EOF/.test(message))
    return new SandboxOperationError(
      'snapshot',
      "gVisor's kernel ended while it saved the sandbox (most often the engine's OOM killer, when saving needed more memory than the sandbox's limit and the checkpoint's headroom left; saving takes more the more processes the sandbox has run), and the sandbox ended with it",
      { cause: error },
    )
  if (!/endpoint still has waiters upon save/.test(message)) return error
  return new SandboxOperationError(
    'snapshot',
    'gVisor could not checkpoint the sandbox: a process in it began to wait on a TCP socket (a server, or a connection it reads) as the checkpoint was taken, which this runsc cannot save',
    { cause: error },
  )
}

/**
 * Places the checkpoint where the engine looks for it when `containerId`
 * starts from it (its own container directory), and starts it so: the
 * processes go on from where they were.
 */
export async function startFromCheckpoint(
  docker: Docker,
  engine: CheckpointEngine,
  containerId: string,
  id: string,
  signal?: AbortSignal,
): Promise<void> {
  const source = checkpointPath(engine, id)
  if (!existsSync(source))
    throw new SandboxOperationError(
      'create',
      `the checkpoint of ${id} is gone from ${source} (removed, or collected past its retention)`,
    )
  const target = join(engine.rootDir, 'containers', containerId, 'checkpoints', id)
  mkdirSync(join(engine.rootDir, 'containers', containerId, 'checkpoints'), {
    recursive: true,
    mode: 0o700,
  })
  cpSync(source, target, { recursive: true, preserveTimestamps: true })
  // `?checkpoint=` with an empty body (the engine refuses a start with a body),
  // which dockerode's types leave out.
  const start = {
    _query: { checkpoint: id },
    _body: {},
    ...(signal ? { abortSignal: signal } : {}),
  }
  // The engine uploads the checkpoint into containerd's content store on each
  // start; two starts of one checkpoint at once (a fork) collide there
  // ("already exists"), so starts of one checkpoint take turns: in this
  // process through startsInFlight, across processes through the lock file
  // beside the checkpoint. One that collides with a start outside cordon is
  // tried again. Once it returns, the copy containerd unpacked for the
  // runtime is removed (containerd-checkpoint-copies.ts says why it leaks).
  const before = startsInFlight.get(id) ?? Promise.resolve()
  const starting = before.then(() =>
    withStartLock(
      startLockPath(engine, id),
      async () => {
        const since = Date.now()
        try {
          for (let attempt = 1; ; attempt++) {
            try {
              await docker.getContainer(containerId).start(start as Docker.ContainerStartOptions)
              return
            } catch (error) {
              if (attempt >= 5 || !/already exists/i.test(String((error as Error).message)))
                throw error
              await new Promise((resolve) => setTimeout(resolve, 100 * attempt))
            }
          }
        } finally {
          removeContainerdCopies(join(source, CHECKPOINT_IMAGE), since)
        }
      },
      signal,
    ),
  )
  const settled = starting.catch(() => {})
  startsInFlight.set(id, settled)
  void settled.then(() => {
    if (startsInFlight.get(id) === settled) startsInFlight.delete(id)
  })
  await starting
}

/** The last start from each checkpoint this process has under way. */
const startsInFlight = new Map<string, Promise<void>>()

/** The bytes a checkpoint takes on the engine's disk. */
export function checkpointBytes(engine: CheckpointEngine, id: string): number {
  let total = 0
  const walk = (dir: string): void => {
    for (const entry of readdirSync(dir, { withFileTypes: true })) {
      const path = join(dir, entry.name)
      if (entry.isDirectory()) walk(path)
      else if (entry.isFile()) total += statSync(path).size
    }
  }
  try {
    walk(checkpointPath(engine, id))
  } catch {
    return total
  }
  return total
}

/** Removes a snapshot's checkpoint from the engine's disk (nothing if there is none). */
export function removeMemoryCheckpoint(rootDir: string, id: string): void {
  if (!/^snp_[0-9A-Za-z_-]+$/.test(id)) return
  rmSync(join(rootDir, CHECKPOINT_DIRECTORY, id), { recursive: true, force: true })
  rmSync(join(rootDir, CHECKPOINT_DIRECTORY, `${id}.start-lock`), { force: true })
  removeCheckpointOwner(join(rootDir, CHECKPOINT_DIRECTORY), id)
}

/**
 * Records whose snapshot `id`'s checkpoint is (checkpoint-owner.ts): done
 * before the checkpoint is written, so that no checkpoint is ever on disk
 * without a way to tell its owner.
 */
export function recordCheckpointOwner(
  engine: CheckpointEngine,
  id: string,
  ownerLabels: Readonly<Record<string, string>>,
): void {
  writeCheckpointOwner(join(engine.rootDir, CHECKPOINT_DIRECTORY), id, ownerLabels)
}

/** The owner labels recorded for snapshot `id`'s checkpoint, if any. */
export function checkpointOwner(rootDir: string, id: string): Record<string, string> | undefined {
  return readCheckpointOwner(join(rootDir, CHECKPOINT_DIRECTORY), id)
}

/**
 * Removes (or with `dryRun` only finds) the copies containerd left of
 * snapshot `id`'s checkpoint, holding the checkpoint's start lock so that no
 * start's copy is taken while the runtime still needs it. Returns their paths.
 */
export async function sweepContainerdCopies(
  rootDir: string,
  id: string,
  dryRun: boolean,
): Promise<string[]> {
  const engine = { rootDir }
  const image = join(checkpointPath(engine, id), CHECKPOINT_IMAGE)
  return withStartLock(startLockPath(engine, id), async () =>
    dryRun ? findContainerdCopies(image, 0) : removeContainerdCopies(image, 0),
  )
}

/** Removes snapshot `id`'s checkpoint from the engine's disk, where this host can reach it. */
export async function removeCheckpointOf(docker: Pick<Docker, 'info'>, id: string): Promise<void> {
  const rootDir = await engineRootDir(docker)
  if (rootDir) removeMemoryCheckpoint(rootDir, id)
}

/** The engine's data directory, if this host can write there (then checkpoints are this host's to manage). */
export async function engineRootDir(docker: Pick<Docker, 'info'>): Promise<string | undefined> {
  const rootDir = ((await docker.info().catch(() => ({}))) as { DockerRootDir?: string })
    .DockerRootDir
  if (!rootDir) return undefined
  try {
    accessSync(join(rootDir, 'containers'), constants.W_OK)
    return rootDir
  } catch {
    return undefined
  }
}

/** How long ago the checkpoint of `id` was written (Infinity if it cannot be read). */
export function checkpointAgeMs(rootDir: string, id: string, now: number): number {
  try {
    return now - statSync(join(rootDir, CHECKPOINT_DIRECTORY, id)).mtimeMs
  } catch {
    return Number.POSITIVE_INFINITY
  }
}

/** The snapshot ids whose checkpoints the engine's disk holds. */
export function listMemoryCheckpoints(rootDir: string): string[] {
  try {
    return readdirSync(join(rootDir, CHECKPOINT_DIRECTORY)).filter((name) =>
      /^snp_[0-9A-Za-z_-]+$/.test(name),
    )
  } catch {
    return []
  }
}

/**
 * Records a memory snapshot whose checkpoint is on disk as an image labelled
 * like every snapshot (made from a helper container that is never started,
 * on the sandbox's base image: a sandbox restored from it runs that image's
 * files). Without its record a checkpoint is garbage: removed here if the
 * record cannot be made.
 */
export async function recordMemorySnapshot(
  source: Omit<SnapshotSource, 'containerId' | 'runtime'>,
  engine: CheckpointEngine,
  id: string,
  createdAt: number,
): Promise<StoredSnapshot> {
  const { docker } = source
  const sizeBytes = checkpointBytes(engine, id)
  const { labels, limits, egress } = snapshotLabels(source, id, createdAt, true)
  const helperName = `cordon-snapshot-${id}`
  const removeHelper = () =>
    docker
      .getContainer(helperName)
      .remove({ force: true })
      .catch(() => {})
  try {
    const helper = await docker.createContainer({
      name: helperName,
      Image: source.baseImage,
      Entrypoint: ['/.cordon-snapshot-is-never-run'],
      Cmd: [],
      Labels: labels,
      NetworkDisabled: true,
      HostConfig: { NetworkMode: 'none', LogConfig: { Type: 'none', Config: {} } },
    })
    const committed = await helper.commit({
      repo: SNAPSHOT_REPOSITORY,
      tag: id,
      pause: false,
      changes: `LABEL cordon.snapshot.bytes=${sizeBytes}`,
    })
    return {
      id,
      createdAt,
      sizeBytes,
      memory: true,
      backend: source.backend,
      sourceSandboxId: source.sandboxId,
      limits,
      egress,
      image: snapshotImage(id),
      baseImage: source.baseImage,
      roots: [...source.roots],
      imageId: (committed as { Id?: string }).Id ?? '',
      user: source.user,
    }
  } catch (error) {
    removeMemoryCheckpoint(engine.rootDir, id)
    throw error
  } finally {
    await removeHelper()
  }
}
