import { execFileSync } from 'node:child_process'
import { createHash } from 'node:crypto'
import { readdirSync, realpathSync, statSync } from 'node:fs'
import { createRequire } from 'node:module'
import { arch as hostArch, platform } from 'node:os'
import { basename, dirname, join } from 'node:path'
import {
  agentLoaderPath,
  agentProgramPath,
  launcherProgramPath,
  startupClockLibraryPath,
} from '@cordon/agent'
import { SandboxBackendUnavailableError } from '@cordon/core'
import { LABEL } from '@cordon/core/backend'
import type Docker from 'dockerode'
import { AGENT_SNAPSHOT_FILE, withStartState } from './agent-start-state.js'
import { isNotFound } from './engine-errors.js'
import { type HostFile, putHostFiles } from './host-files-archive.js'
import { ensureHugePageNode, type HugePageNode, hugePageNodeIsPresent } from './huge-page-node.js'
import { loaderTakesPreload, STARTUP_CLOCK_FILE } from './startup-clock.js'

/**
 * The runtime every cordon container runs on, whatever its image: a read-only
 * volume holding a Node binary with its own dynamic loader and libraries,
 * cordon's agent, and the egress gateway's modules. An image needs no Node,
 * no shell and no libc of its own: the agent is started through the
 * volume's loader (`ld.so --library-path /.cordon/lib /.cordon/bin/node`), so
 * only the agent uses those libraries, and the commands it starts use the
 * image's.
 *
 * The volume is filled once per engine and content (its name carries a hash
 * of what went in), shared read-only by every container of every provider,
 * and its files live in the engine's page cache once: an idle sandbox is
 * charged for its agent's private memory, not for another copy of Node.
 *
 * The runtime is this host's Node (`process.execPath`) and the libraries it
 * links, so the host must be Linux on the engine's architecture (a host in a
 * container on that engine is).
 */

/** Where the runtime volume is mounted in every container. */
export const RUNTIME_MOUNT = '/.cordon'

export interface AgentRuntime {
  /** The volume's name, `cordon-runtime-<hash>`. */
  readonly volume: string
  /** The command that starts a script with the runtime's Node. */
  node(script: string, ...args: string[]): string[]
  /** The agent program inside the runtime. */
  readonly agentScript: string
  /**
   * The container's entry: the agent, started by cordon-launcher where the
   * runtime holds one (`--agent`: the agent then needs no fork of its own
   * to start commands, which saves milliseconds of every create), else by
   * the runtime's Node directly.
   */
  readonly agentEntrypoint: string[]
  /**
   * {@link agentEntrypoint} with options for the agent's Node
   * (gvisor-agent-threads.ts), and started from the volume's startup
   * snapshot where `fromSnapshot` asks it and the volume holds one
   * (agent-start-state.ts), with the startup clock preloaded where
   * `startupClock` asks it and the volume and its loader allow it
   * (startup-clock.ts).
   */
  agentEntrypointWith(
    nodeOptions: readonly string[],
    start?: { fromSnapshot?: boolean; startupClock?: boolean },
  ): string[]
  /** The egress gateway program inside the runtime. */
  readonly gatewayScript: string
  /**
   * The huge-page copy of Node the agent starts from (huge-page-node.ts), or
   * undefined where the engine cannot hold one; every sandbox container then
   * mounts its volume too.
   */
  readonly hugePageNode: HugePageNode | undefined
  /**
   * cordon-launcher inside the runtime (the agent starts commands through it,
   * with vfork(), rather than forking Node); undefined when `@cordon/agent`
   * holds no build for this architecture, and the agent uses Node's spawn.
   */
  readonly launcher: string | undefined
}

/** Which loader and libraries `node` needs, the way the dynamic linker resolves them here. */
function nodeDependencies(node: string): { loader: string; libraries: string[] } {
  const output = execFileSync('ldd', [node], { encoding: 'utf8', env: { LC_ALL: 'C' } })
  let loader: string | undefined
  const libraries: string[] = []
  for (const line of output.split('\n')) {
    const linked = /=>\s+(\/\S+)/.exec(line)
    if (linked) {
      libraries.push(linked[1]!)
      continue
    }
    const direct = /^\s*(\/\S+)/.exec(line)
    if (direct && /ld-linux|ld-musl|ld\.so/.test(direct[1]!)) loader = direct[1]!
  }
  if (!loader) throw new Error(`ldd found no dynamic loader for ${node}`)
  return { loader, libraries }
}

/** The files of the egress gateway: its package, and every package it imports, as installed here. */
function gatewayFiles(): HostFile[] {
  const files: HostFile[] = []
  const seen = new Set<string>()
  const visit = (name: string, from: string): void => {
    let manifestPath: string
    try {
      manifestPath = createRequire(from).resolve(`${name}/package.json`)
    } catch {
      // Packages that hide package.json: find it from the entry point.
      const entry = createRequire(from).resolve(name)
      let dir = dirname(entry)
      while (!readdirSync(dir).includes('package.json')) dir = dirname(dir)
      manifestPath = join(dir, 'package.json')
    }
    const dir = dirname(realpathSync(manifestPath))
    if (seen.has(name)) return
    seen.add(name)
    const manifest = createRequire(from)(manifestPath) as {
      dependencies?: Record<string, string>
      peerDependencies?: Record<string, string>
      peerDependenciesMeta?: Record<string, { optional?: boolean }>
    }
    for (const file of walk(dir)) {
      const relative = file.slice(dir.length + 1)
      // What Node loads at run time; sources, types, maps and nested installs stay behind.
      if (/^(node_modules|src|test|docs)\//.test(relative)) continue
      if (!/\.(js|cjs|mjs|json)$/.test(relative)) continue
      files.push({
        name: `gateway/node_modules/${name}/${relative}`,
        source: file,
        mode: 0o644,
      })
    }
    const required = {
      ...manifest.dependencies,
      ...Object.fromEntries(
        Object.entries(manifest.peerDependencies ?? {}).filter(
          ([peer]) => !manifest.peerDependenciesMeta?.[peer]?.optional,
        ),
      ),
    }
    for (const dependency of Object.keys(required)) visit(dependency, manifestPath)
  }
  visit('@cordon/egress', import.meta.url)
  return files
}

function* walk(dir: string): Generator<string> {
  for (const entry of readdirSync(dir, { withFileTypes: true })) {
    const path = join(dir, entry.name)
    if (entry.isDirectory()) yield* walk(path)
    else if (entry.isFile()) yield path
  }
}

function runtimeFiles(): {
  files: HostFile[]
  loaderName: string
  launcher: boolean
  startupClock: boolean
} {
  if (platform() !== 'linux') {
    throw new Error(`the agent runtime is this host's Node, and this host runs ${platform()}`)
  }
  const node = realpathSync(process.execPath)
  const { loader, libraries } = nodeDependencies(node)
  const loaderName = basename(loader)
  const files: HostFile[] = [
    { name: 'bin/node', source: node, mode: 0o755 },
    { name: `lib/${loaderName}`, source: loader, mode: 0o755 },
    ...libraries.map((library) => ({
      name: `lib/${basename(library)}`,
      source: library,
      mode: 0o644,
    })),
    // CommonJS: Node's ES module loader would add its start-up to every create (bench scenario 11).
    { name: 'agent.cjs', source: agentProgramPath('cjs'), mode: 0o644 },
    // Starts it from `agent.cjs.cache`, and is what `agent.blob` is a snapshot of,
    // both made when the volume is filled (agent-start-state.ts).
    { name: 'agent-loader.cjs', source: agentLoaderPath(), mode: 0o644 },
    ...gatewayFiles(),
  ]
  const launcher = launcherProgramPath(hostArch())
  if (launcher) files.push({ name: 'bin/cordon-launcher', source: launcher, mode: 0o755 })
  const startupClock = startupClockLibraryPath(hostArch())
  if (startupClock) files.push({ name: STARTUP_CLOCK_FILE, source: startupClock, mode: 0o644 })
  return {
    files,
    loaderName,
    launcher: launcher !== undefined,
    startupClock: startupClock !== undefined,
  }
}

/** The content's fingerprint: names, sizes and modification times (fast; no need to read 100 MB). */
function fingerprint(files: readonly HostFile[]): string {
  const hash = createHash('sha256')
  for (const file of files) {
    const stat = statSync(file.source)
    hash.update(`${file.name}\0${stat.size}\0${stat.mtimeMs}\0${file.mode}\n`)
  }
  return hash.digest('hex').slice(0, 16)
}

const ENGINE_ARCHITECTURES: Readonly<Record<string, string>> = {
  x86_64: 'x64',
  amd64: 'x64',
  aarch64: 'arm64',
  arm64: 'arm64',
}

/** On the completion mark: `1` when the volume holds the agent's startup snapshot. */
const SNAPSHOT_LABEL = 'cordon.runtime.snapshot'

/** Runtimes prepared (or being prepared) by this process, per engine endpoint. */
const prepared = new Map<string, Promise<AgentRuntime>>()

/** A filler's lock container older than this belongs to a filler that died. */
export const STALE_FILL_LOCK_MS = 120_000

/**
 * `cordon-runtime-<hash>`, its completion mark `cordon-runtime-<hash>-complete`
 * and its huge-page Node `cordon-runtime-<hash>-node` (huge-page-node.ts).
 */
export const RUNTIME_VOLUME_NAME = /^cordon-runtime-[0-9a-f]{16}(-complete|-node)?$/

let currentVolume: string | undefined | null = null

/**
 * The runtime volume this process's runtime would use (what `cordon gc`
 * keeps), or undefined where this host cannot assemble one. Computed from
 * file sizes and times, once.
 */
export function currentRuntimeVolume(): string | undefined {
  if (currentVolume === null) {
    try {
      currentVolume = `cordon-runtime-${fingerprint(runtimeFiles().files)}`
    } catch {
      currentVolume = undefined
    }
  }
  return currentVolume
}

/**
 * The runtime volume on this engine, filled if it is not there yet. Many
 * providers, in this process or others, may ask at once: one fills while
 * holding a lock (a container named for the volume, which only one can
 * create); the rest wait for its completion mark (a second, empty volume).
 */
export function ensureAgentRuntime(
  docker: Docker,
  endpoint: string,
  helperImage: string,
  backend: string,
): Promise<AgentRuntime> {
  const key = `${endpoint}\0${helperImage}`
  let pending = prepared.get(key)
  if (!pending) {
    pending = prepare(docker, helperImage, backend)
    prepared.set(key, pending)
    pending.catch(() => prepared.delete(key))
  }
  return pending
}

/**
 * Whether the runtime's volume and its completion mark are still on the
 * engine. They can go while a process holds the runtime (a person's `docker
 * volume rm`, or `cordon gc` of a host of another version while no
 * container used it); a container created then gets an empty volume the
 * engine makes on the spot, and fails to start.
 */
export async function agentRuntimeIsPresent(
  docker: Docker,
  runtime: AgentRuntime,
): Promise<boolean> {
  const [volume, done, hugePageNode] = await Promise.all([
    volumeIsRuntime(docker, runtime.volume),
    volumeExists(docker, `${runtime.volume}-complete`),
    runtime.hugePageNode ? hugePageNodeIsPresent(docker, runtime.hugePageNode) : true,
  ])
  return volume && done && hugePageNode
}

/** Drops this process's prepared runtime for the engine, so the next create prepares it again. */
export function forgetAgentRuntime(endpoint: string, helperImage: string): void {
  prepared.delete(`${endpoint}\0${helperImage}`)
}

async function prepare(
  docker: Docker,
  helperImage: string,
  backend: string,
): Promise<AgentRuntime> {
  const info = (await docker.info()) as { Architecture?: string; OSType?: string }
  const engineArch = ENGINE_ARCHITECTURES[info.Architecture ?? ''] ?? info.Architecture
  let content: ReturnType<typeof runtimeFiles>
  try {
    content = runtimeFiles()
  } catch (error) {
    throw new SandboxBackendUnavailableError(
      backend,
      `cannot assemble the agent runtime: ${(error as Error).message}`,
      { cause: error },
    )
  }
  if (info.OSType !== 'linux' || engineArch !== hostArch()) {
    throw new SandboxBackendUnavailableError(
      backend,
      `the agent runtime is this host's Node (linux/${hostArch()}), and the engine runs ${info.OSType}/${info.Architecture}; run the host on Linux with the engine's architecture (for example in a container on that engine)`,
    )
  }
  const hash = fingerprint(content.files)
  const volume = `cordon-runtime-${hash}`
  currentVolume = volume
  const done = `${volume}-complete`
  const lock = `${volume}-filling`
  const startNode = (
    binary: string,
    script: string,
    args: readonly string[] = [],
    nodeOptions: readonly string[] = [],
    preload: readonly string[] = [],
  ): string[] => [
    `${RUNTIME_MOUNT}/lib/${content.loaderName}`,
    '--library-path',
    `${RUNTIME_MOUNT}/lib`,
    ...(preload.length > 0 ? ['--preload', preload.join(':')] : []),
    binary,
    ...nodeOptions,
    script,
    ...args,
  ]
  const node = (script: string, ...args: string[]): string[] =>
    startNode(`${RUNTIME_MOUNT}/bin/node`, script, args)
  const agentScript = `${RUNTIME_MOUNT}/agent.cjs`
  const agentLoader = `${RUNTIME_MOUNT}/agent-loader.cjs`
  const agentSnapshot = `${RUNTIME_MOUNT}/${AGENT_SNAPSHOT_FILE}`
  const launcher = content.launcher ? `${RUNTIME_MOUNT}/bin/cordon-launcher` : undefined
  const startupClock =
    content.startupClock && loaderTakesPreload()
      ? `${RUNTIME_MOUNT}/${STARTUP_CLOCK_FILE}`
      : undefined
  const labels = { [LABEL.managed]: '1', [LABEL.role]: 'runtime', 'cordon.runtime': hash }
  const withHugePageNode = async (startState: { snapshot: boolean }): Promise<AgentRuntime> => {
    // The keeper's program is the launcher; without one for this architecture, no huge pages.
    const hugePageNode = launcher
      ? await ensureHugePageNode(docker, {
          runtimeVolume: volume,
          runtimeMount: RUNTIME_MOUNT,
          launcher,
          nodeSource: realpathSync(process.execPath),
          labels,
        })
      : undefined
    const agentNode = hugePageNode?.path ?? `${RUNTIME_MOUNT}/bin/node`
    const agentEntrypointWith = (
      nodeOptions: readonly string[],
      start: { fromSnapshot?: boolean; startupClock?: boolean } = {},
    ): string[] => {
      const preload = start.startupClock && startupClock ? [startupClock] : []
      // From the loader's startup snapshot where asked and the volume holds one, else the loader as a script.
      const agent =
        start.fromSnapshot && startState.snapshot
          ? startNode(
              agentNode,
              agentScript,
              [],
              [...nodeOptions, '--snapshot-blob', agentSnapshot],
              preload,
            )
          : startNode(agentNode, agentLoader, [agentScript], nodeOptions, preload)
      return launcher ? [launcher, '--agent', ...agent] : agent
    }
    return {
      volume,
      node,
      agentScript,
      gatewayScript: `${RUNTIME_MOUNT}/gateway/node_modules/@cordon/egress/dist/gateway.js`,
      launcher,
      hugePageNode,
      agentEntrypoint: agentEntrypointWith([]),
      agentEntrypointWith,
    }
  }
  const deadline = Date.now() + 120_000
  for (;;) {
    const [filled, marked] = await Promise.all([
      volumeIsRuntime(docker, volume),
      volumeLabels(docker, done),
    ])
    if (filled && marked) return withHugePageNode({ snapshot: marked[SNAPSHOT_LABEL] === '1' })
    const filler = await acquireLock(docker, lock, volume, helperImage, labels)
    if (filler) {
      try {
        const startState = await withStartState(content.files, (files) =>
          putHostFiles(filler, RUNTIME_MOUNT, files),
        )
        // The mark says whether the volume holds the snapshot: every process
        // that finds the volume filled starts its agents the same way.
        await docker.createVolume({
          Name: done,
          Labels: { ...labels, [SNAPSHOT_LABEL]: startState.snapshot ? '1' : '0' },
        })
        return withHugePageNode(startState)
      } finally {
        await filler.remove({ force: true }).catch(() => {})
      }
    }
    if (Date.now() > deadline) {
      throw new SandboxBackendUnavailableError(
        backend,
        `another process has been filling the agent runtime volume ${volume} for over two minutes; remove the container ${lock} if that process is gone`,
      )
    }
    await new Promise((resolve) => setTimeout(resolve, 250))
  }
}

/** The volume exists and is one cordon made (labelled), not one the engine made empty on demand. */
async function volumeIsRuntime(docker: Docker, name: string): Promise<boolean> {
  try {
    const volume = await docker.getVolume(name).inspect()
    return volume.Labels?.[LABEL.role] === 'runtime'
  } catch (error) {
    if (isNotFound(error)) return false
    throw error
  }
}

async function volumeExists(docker: Docker, name: string): Promise<boolean> {
  return (await volumeLabels(docker, name)) !== undefined
}

/** The volume's labels, or undefined if there is no such volume. */
async function volumeLabels(
  docker: Docker,
  name: string,
): Promise<Record<string, string> | undefined> {
  try {
    return (await docker.getVolume(name).inspect()).Labels ?? {}
  } catch (error) {
    if (isNotFound(error)) return undefined
    throw error
  }
}

/**
 * Creates the lock container (not started: it only holds the name and mounts
 * the volume for the archive API), or returns undefined if another holds it.
 * A lock older than two minutes belongs to a filler that died: it is removed.
 */
async function acquireLock(
  docker: Docker,
  lock: string,
  volume: string,
  helperImage: string,
  labels: Readonly<Record<string, string>>,
): Promise<Docker.Container | undefined> {
  await docker.createVolume({ Name: volume, Labels: labels })
  if (!(await volumeIsRuntime(docker, volume))) {
    // The engine made it, empty and unlabelled, for a container created after
    // the runtime volume was removed. Made again with the labels if nothing
    // mounts it any more; else filled as it is (`cordon gc` knows runtime
    // volumes by their name as well).
    await docker
      .getVolume(volume)
      .remove()
      .then(() => docker.createVolume({ Name: volume, Labels: labels }))
      .catch(() => {})
  }
  try {
    return await docker.createContainer({
      name: lock,
      Image: helperImage,
      Entrypoint: ['/.cordon-fill'],
      Labels: labels,
      NetworkDisabled: true,
      HostConfig: {
        NetworkMode: 'none',
        Mounts: [{ Type: 'volume', Source: volume, Target: RUNTIME_MOUNT, ReadOnly: false }],
      },
    })
  } catch (error) {
    if ((error as { statusCode?: number }).statusCode !== 409) throw error
    const holder = await docker
      .getContainer(lock)
      .inspect()
      .catch(() => undefined)
    if (holder && Date.now() - Date.parse(holder.Created) > STALE_FILL_LOCK_MS) {
      await docker
        .getContainer(lock)
        .remove({ force: true })
        .catch(() => {})
    }
    return undefined
  }
}
