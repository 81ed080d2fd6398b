import { statSync } from 'node:fs'
import type Docker from 'dockerode'
import { hardenedHostConfig } from './container-hardening.js'
import { isNotFound } from './engine-errors.js'
import { putHostFiles } from './host-files-archive.js'
import { ensureKeeperImage } from './keeper-image.js'

/**
 * A copy of the runtime's Node binary on a tmpfs with transparent huge pages,
 * which every sandbox's agent is started from where the engine allows it.
 *
 * Why: mapped from an ordinary file, Node's 90 MiB binary costs a starting
 * process about 1,900 page faults here, each mapping 4 KiB of it; mapped
 * from huge pages, each fault maps 2 MiB (Node's text segments are laid out
 * 2 MiB-aligned for this). Started from it, the agent's program ran to its
 * end in 0.81x the time (bench scenario 11): about 14 ms of every create, a
 * sixth of the time from the engine's start call to the first command's
 * answer. The pages are shared by every sandbox on the engine, like the
 * runtime volume's.
 *
 * How: a volume of the engine's `local` driver mounted as tmpfs with
 * `huge=always` holds the one file. A tmpfs volume lives only while some
 * container has it mounted, so a keeper container holds it: cordon-launcher
 * from the runtime volume, waiting on a stdin that is held open and never
 * written (no CPU, well under a MiB), as an unprivileged user on cordon's
 * hardened container base (no capabilities, no network, an init, a memory
 * limit that does not count the volume's pages). The binary is written through the engine's
 * archive API while the keeper has a filling name; it takes its own name
 * once the binary is whole.
 *
 * Cost: the binary's size in memory (about 96 MiB, not evictable while the
 * keeper runs) and one idle container per engine and runtime. Both go with
 * their runtime (runtime-garbage.ts). After an engine restart the keeper is
 * gone and the next create makes it again. Where any step fails (an engine
 * whose kernel has no transparent huge pages refuses the mount option, a
 * remote engine of another kind), the agent runs from the runtime volume as
 * before: only slower.
 */

/** Where the volume is mounted in a sandbox. */
export const HUGE_PAGE_NODE_MOUNT = '/.cordon-node'

export interface HugePageNode {
  /** The tmpfs volume, `cordon-runtime-<hash>-node`. */
  readonly volume: string
  /** The container that keeps it mounted, `cordon-runtime-<hash>-keeper`. */
  readonly keeper: string
  /** The binary inside a sandbox. */
  readonly path: string
}

export interface HugePageNodeRequest {
  /** The runtime volume's name. */
  readonly runtimeVolume: string
  readonly runtimeMount: string
  /** cordon-launcher inside the runtime volume: the keeper's program. */
  readonly launcher: string
  /** The Node binary on this host. */
  readonly nodeSource: string
  readonly labels: Readonly<Record<string, string>>
}

/** Label that tells a keeper from a filler's lock (both have the runtime role). */
export const KEEPER_LABEL = 'cordon.runtime.part'

const PREPARE_TIMEOUT_MS = 60_000
/** A keeper still being filled after this long belongs to a process that died filling it. */
const STALE_FILLING_MS = 120_000
const HUGE_PAGE_BYTES = 2 * 1024 * 1024
/**
 * The keeper's memory limit. It needs well under one: measured on its cgroup
 * (v1, runc), about 0.5 MiB while it and its init wait and a 4.3 MiB peak while runc
 * starts it. The binary on its volume is not charged to it (the engine's
 * archive API writes it, from outside the container), so the limit does not
 * grow with Node's size. The keeper always runs under the engine's default
 * runtime, runc where cordon is tested.
 */
export const KEEPER_MEMORY_MB = 16
/** The init and the launcher. */
export const KEEPER_PIDS_LIMIT = 4

/**
 * The huge-page Node for this runtime, made if it is not there yet; undefined
 * where the engine cannot hold one. Many processes may ask at once: the
 * keeper is created under a filling name, which only one can take, and
 * renamed to its own once the binary is in; so a keeper under its own name
 * is a complete one. (Asking the archive API whether a mark file exists
 * would do as well, but dockerode's HEAD request leaves a socket that keeps
 * the process alive: `cordon prepare` never exited.)
 */
export async function ensureHugePageNode(
  docker: Docker,
  request: HugePageNodeRequest,
): Promise<HugePageNode | undefined> {
  const node: HugePageNode = {
    volume: `${request.runtimeVolume}-node`,
    keeper: `${request.runtimeVolume}-keeper`,
    path: `${HUGE_PAGE_NODE_MOUNT}/node`,
  }
  const deadline = Date.now() + PREPARE_TIMEOUT_MS
  let failures = 0
  try {
    while (Date.now() < deadline) {
      const state = await keeperState(docker, node)
      if (state === 'ready') return node
      if (state === 'stopped') {
        await removeContainer(docker, node.keeper)
        continue
      }
      if (state === 'filling') {
        await new Promise((resolve) => setTimeout(resolve, 250))
        continue
      }
      try {
        if (await makeKeeper(docker, node, request)) return node
      } catch (error) {
        // Without a keeper every sandbox this process creates starts from the
        // runtime volume's Node (slower) for as long as it holds the runtime,
        // so a failure is tried again a few times. Seen once in a full test
        // run on a loaded machine, just after the runtime was filled again;
        // what failed was not recorded.
        if (++failures >= KEEPER_ATTEMPTS) throw error
        await new Promise((resolve) => setTimeout(resolve, 250))
      }
    }
    return undefined
  } catch {
    // Whatever went wrong, the runtime volume's own Node still works.
    return undefined
  }
}

/** How many times a keeper that fails to be made is tried (see ensureHugePageNode). */
const KEEPER_ATTEMPTS = 3

/** Whether the keeper runs and holds a complete copy (checked when a create failed). */
export async function hugePageNodeIsPresent(docker: Docker, node: HugePageNode): Promise<boolean> {
  return (await keeperState(docker, node)) === 'ready'
}

type KeeperState = 'missing' | 'stopped' | 'filling' | 'ready'

async function keeperState(docker: Docker, node: HugePageNode): Promise<KeeperState> {
  const keeper = await inspectIfThere(docker, node.keeper)
  if (keeper) return keeper.State.Running ? 'ready' : 'stopped'
  const filling = await inspectIfThere(docker, fillingName(node))
  if (!filling) return 'missing'
  if (Date.now() - Date.parse(filling.Created) <= STALE_FILLING_MS) return 'filling'
  // Left by a process that died filling it.
  await removeContainer(docker, fillingName(node))
  return 'missing'
}

function fillingName(node: HugePageNode): string {
  return `${node.keeper}-filling`
}

async function inspectIfThere(
  docker: Docker,
  name: string,
): Promise<Docker.ContainerInspectInfo | undefined> {
  try {
    return await docker.getContainer(name).inspect()
  } catch (error) {
    if (isNotFound(error)) return undefined
    throw error
  }
}

/** Creates, starts and fills the keeper; false if another process created it first. */
async function makeKeeper(
  docker: Docker,
  node: HugePageNode,
  request: HugePageNodeRequest,
): Promise<boolean> {
  const size = statSync(request.nodeSource).size
  const tmpfsBytes = Math.ceil(size / HUGE_PAGE_BYTES) * HUGE_PAGE_BYTES + 2 * HUGE_PAGE_BYTES
  const volume = {
    Name: node.volume,
    Driver: 'local',
    DriverOpts: { type: 'tmpfs', device: 'tmpfs', o: `size=${tmpfsBytes},mode=0755,huge=always` },
    Labels: { ...request.labels },
  }
  await docker.createVolume(volume)
  const made = await docker.getVolume(node.volume).inspect()
  if ((made.Options as Record<string, string> | null)?.type !== 'tmpfs') {
    // An ordinary volume of that name, which the engine made empty for a
    // sandbox created after the keeper and its volume had gone (the engine
    // hands back an existing volume whatever options are asked for). Made
    // again as tmpfs; if a container still holds it, this attempt fails.
    await docker.getVolume(node.volume).remove()
    await docker.createVolume(volume)
  }
  // Not a provider's image: the keeper outlives every provider (keeper-image.ts).
  const image = await ensureKeeperImage(docker)
  let keeper: Docker.Container
  try {
    keeper = await docker.createContainer({
      name: fillingName(node),
      Image: image,
      // With no arguments the launcher reads requests on stdin until it ends:
      // held open (OpenStdin) and never attached, it waits there for good.
      Entrypoint: [request.launcher],
      Cmd: [],
      User: '65534:65534',
      OpenStdin: true,
      StdinOnce: false,
      NetworkDisabled: true,
      Labels: { ...request.labels, [KEEPER_LABEL]: 'keeper' },
      HostConfig: hardenedHostConfig({
        networkMode: 'none',
        memoryBytes: KEEPER_MEMORY_MB * 1024 * 1024,
        pidsLimit: KEEPER_PIDS_LIMIT,
        mounts: [
          {
            Type: 'volume',
            Source: request.runtimeVolume,
            Target: request.runtimeMount,
            ReadOnly: true,
          },
          // Writable for the archive API only: the keeper's user cannot write to it (root's, 0755).
          { Type: 'volume', Source: node.volume, Target: HUGE_PAGE_NODE_MOUNT, ReadOnly: false },
        ],
      }),
    })
  } catch (error) {
    if ((error as { statusCode?: number }).statusCode === 409) return false
    throw error
  }
  try {
    await keeper.start()
    await putHostFiles(keeper, HUGE_PAGE_NODE_MOUNT, [
      { name: 'node', source: request.nodeSource, mode: 0o755 },
    ])
    // Under its own name only once whole (see ensureHugePageNode).
    await keeper.rename({ name: node.keeper })
    return true
  } catch (error) {
    await removeContainer(docker, fillingName(node))
    throw error
  }
}

async function removeContainer(docker: Docker, name: string): Promise<void> {
  await docker
    .getContainer(name)
    .remove({ force: true })
    .catch(() => {})
}
