import { createHash } from 'node:crypto'
import type { ContainerBackendConfig } from '@cordon/builtin-backends'
import {
  type ResolvedContainerSandboxLayout,
  SandboxConfigValidationError,
  SandboxControlRefusedError,
} from '@cordon/core'
import {
  type LayoutMountPlan,
  planLayoutMounts,
  readableRoots,
  type SandboxCreateRequest,
  writableRoots,
} from '@cordon/core/backend'
import type { ContainerCreateOptions, MountSettings } from 'dockerode'
import { type AgentRuntime, RUNTIME_MOUNT } from './agent-runtime.js'
import { agentStartsFromSnapshot } from './agent-start-state.js'
import { hardenedHostConfig } from './container-hardening.js'
import { engineMessage } from './engine-errors.js'
import { agentNodeOptions } from './gvisor-agent-threads.js'
import { HUGE_PAGE_NODE_MOUNT } from './huge-page-node.js'
import { engineVolumeName, type VolumeMountRequest } from './named-volumes.js'
import { agentUsesStartupClock } from './startup-clock.js'

export const DEFAULT_CPUS = 1
export const DEFAULT_TMPFS_MB = 64
/** Size cap of an `ephemeral` mount that does not set `sizeMb`. */
export const DEFAULT_EPHEMERAL_SIZE_MB = 256
/**
 * Disk cap of a writable `hostDir` mount that does not set `sizeMb`: finite,
 * so that no sandbox can fill its host's disk by default.
 */
export const DEFAULT_HOST_DIR_SIZE_MB = 1024
/** The loopback port a sandbox behind the egress gateway uses as its HTTP proxy. */
export const EGRESS_PROXY_PORT = 3128

/** The environment pointing a sandbox's commands at its proxy port; both spellings, because tools disagree on which one they read. */
export function proxyEnvironment(): Record<string, string> {
  const url = `http://127.0.0.1:${EGRESS_PROXY_PORT}`
  return {
    HTTP_PROXY: url,
    HTTPS_PROXY: url,
    http_proxy: url,
    https_proxy: url,
    NO_PROXY: 'localhost,127.0.0.1',
    no_proxy: 'localhost,127.0.0.1',
  }
}

/**
 * Memory the agent needs on top of what the sandbox's commands may use: its
 * Node heap, charged to the same cgroup. Added to the
 * limit so `memoryLimitMb` stays what the commands get.
 */
export const AGENT_MEMORY_ALLOWANCE_MB = 48
/**
 * Memory gVisor's kernel (the sentry) needs on top, under runsc: its Go heap
 * is charged to the sandbox's cgroup, and this runsc keeps a `/proc/<pid>`
 * entry of about 30 KiB for every process that read `/proc/self` (busybox
 * and Node do at start), in a cache that stopped growing after two to
 * three thousand processes here. Measured
 * through cordon: an idle sandbox's cgroup held 22 MB, and after 1,000,
 * 2,000, 3,000, 4,000 and 6,000 commands 119, 159, 164, 164 and 164 MB at
 * most; the sentry's heap profile put 60 MiB of it in those entries and the
 * rest in the collector's slack. Without the allowance a sandbox at 96 MiB
 * was ended, kernel and all, by a loop of 2,000 `/bin/true` that used
 * nothing itself (test/gvisor-kernel-memory.test.ts).
 */
export const GVISOR_KERNEL_MEMORY_ALLOWANCE_MB = 160

/**
 * The memory cgroup limit of a sandbox's container: `memoryLimitMb` for the
 * commands, plus the agent's allowance, plus gVisor's kernel's under runsc,
 * so that `memoryLimitMb` is what the commands get on either runtime.
 */
export function containerMemoryLimitMb(
  config: Pick<ContainerBackendConfig, 'runtime'>,
  memoryLimitMb: number,
): number {
  const kernel = config.runtime === 'runsc' ? GVISOR_KERNEL_MEMORY_ALLOWANCE_MB : 0
  return memoryLimitMb + AGENT_MEMORY_ALLOWANCE_MB + kernel
}

/** How the container's limit is made up, for messages that name it. */
export function memoryAllowanceText(config: Pick<ContainerBackendConfig, 'runtime'>): string {
  return config.runtime === 'runsc'
    ? `memoryLimitMb plus ${AGENT_MEMORY_ALLOWANCE_MB} MiB for cordon's agent and ${GVISOR_KERNEL_MEMORY_ALLOWANCE_MB} MiB for gVisor's kernel`
    : `memoryLimitMb plus ${AGENT_MEMORY_ALLOWANCE_MB} MiB for cordon's agent`
}
/**
 * The smallest `memoryLimitMb` a sandbox is created with; a smaller one is
 * refused. Measured on Engine 20.10: under gVisor, whose kernel's page cache
 * is charged to the same cgroup as the agent and the commands, sandboxes of
 * 1, 8 and 10 MiB (and one run in three at 16) were killed while cordon
 * streamed a 100 MiB file through a host directory; at 24 and 32 MiB none
 * was, also under load (test/memory-floor.test.ts holds the minimum to it).
 * runc got through at 1 MiB. One floor for both runtimes, so that a config
 * means the same on each.
 */
export const MIN_MEMORY_LIMIT_MB = 32
/**
 * Tasks the agent and the init use, added to the pids
 * cgroup's limit (a backstop; `maxProcesses` itself is the sandbox user's
 * RLIMIT_NPROC), and the worker's few threads, which count toward that user.
 */
const AGENT_TASK_ALLOWANCE = 48

/** The lowest uid a sandbox's user gets: far above any host account's. */
const SANDBOX_UID_BASE = 2 ** 30
const SANDBOX_UID_SPAN = 2 ** 30 - 2

/**
 * The user a sandbox's commands run as: `user` from the config if set, else
 * a uid of its own, derived from its random id, above 2^30 where no host
 * account lives. Per-user kernel limits (processes, inotify instances, pipe
 * buffers, message queues) then belong to one sandbox, not to every sandbox
 * and a host account at once. Two live sandboxes share a uid with odds of
 * about n²/2^31 (n live sandboxes).
 */
export function sandboxUser(
  config: Pick<ContainerBackendConfig, 'user'>,
  sandboxId: string,
): { uid: number; gid: number } {
  if (config.user) {
    const [uid, gid] = config.user.split(':').map(Number)
    return { uid: uid!, gid: gid ?? uid! }
  }
  const digest = createHash('sha256').update(sandboxId).digest()
  const uid = SANDBOX_UID_BASE + (digest.readUInt32BE(0) % SANDBOX_UID_SPAN)
  return { uid, gid: uid }
}

/**
 * The engine-side mounts for a layout: host directories as bind mounts, the
 * agent runtime read-only. Only sources a Docker Engine can provide are
 * accepted; the others are refused by name rather than silently skipped, and
 * a host directory that would expose the engine's socket is refused.
 * `ephemeral` sources become tmpfs mounts (see {@link tmpfsMounts}).
 */
export function layoutMounts(
  layout: ResolvedContainerSandboxLayout,
  runtime: AgentRuntime,
  backend: string,
  engineSocketPath: string | undefined,
): MountSettings[] {
  const mounts = planLayoutMounts(layout).flatMap((mount) =>
    engineMount(mount, backend, engineSocketPath),
  )
  mounts.push({ Type: 'volume', Source: runtime.volume, Target: RUNTIME_MOUNT, ReadOnly: true })
  if (runtime.hugePageNode) {
    mounts.push({
      Type: 'volume',
      Source: runtime.hugePageNode.volume,
      Target: HUGE_PAGE_NODE_MOUNT,
      ReadOnly: true,
    })
  }
  return mounts
}

/**
 * The engine's refusal of a bind mount whose host directory does not exist,
 * as a config error naming the layout's key. Asked of the engine, not of
 * this process's file system: the directory is on the engine's host, which
 * may be another machine.
 */
export function missingHostDirectory(
  error: unknown,
  layout: ResolvedContainerSandboxLayout,
): SandboxConfigValidationError | undefined {
  const said = /bind source path does not exist: (.+)$/m.exec(engineMessage(error))
  if (!said) return undefined
  const missing = said[1]!.trim()
  const issues = planLayoutMounts(layout).flatMap((mount) =>
    mount.source.type === 'hostDir' && mount.source.hostPath.replace(/\/+$/, '') === missing
      ? [
          {
            path: `layout.${mount.role === 'skill' ? `skills.${mount.skillId}` : mount.role}.source.hostPath`,
            message: `host directory ${mount.source.hostPath} does not exist on the engine's host; make it first`,
          },
        ]
      : [],
  )
  return issues.length > 0
    ? new SandboxConfigValidationError('sandbox layout', issues, { cause: error })
    : undefined
}

function engineMount(
  mount: LayoutMountPlan,
  backend: string,
  engineSocketPath: string | undefined,
): MountSettings[] {
  const source = mount.source
  const control = `layout.${mount.role === 'skill' ? `skills.${mount.skillId}` : mount.role}.source`
  switch (source.type) {
    case 'hostDir': {
      if (
        engineSocketPath &&
        (engineSocketPath === source.hostPath ||
          engineSocketPath.startsWith(`${source.hostPath.replace(/\/$/, '')}/`))
      ) {
        throw new SandboxControlRefusedError(
          control,
          backend,
          `host directory ${source.hostPath} contains the engine socket ${engineSocketPath}; mounting it would hand the sandbox the engine`,
        )
      }
      return [
        {
          Type: 'bind',
          Source: source.hostPath,
          Target: mount.containerPath,
          ReadOnly: mount.readOnly,
        },
      ]
    }
    case 'volume':
      return [
        {
          Type: 'volume',
          Source: engineVolumeName(source.name),
          Target: mount.containerPath,
          ReadOnly: mount.readOnly,
          // The volume is the user's data: nothing of the image is copied into an empty one.
          VolumeOptions: { NoCopy: true } as MountSettings['VolumeOptions'],
        },
      ]
    case 'ephemeral':
      return []
    case 'inImage':
    case 'azureFileShare':
      // Refused before anything is made (the definition's layoutRefusal); a
      // source that reached here anyway is not mounted silently.
      throw new SandboxControlRefusedError(
        control,
        backend,
        `a ${source.type} source is not mounted by the Docker Engine`,
      )
    default:
      throw new SandboxControlRefusedError(control, backend, 'unknown mount source')
  }
}

/**
 * Layout mounts this engine cannot give the way they are asked for, refused
 * before anything is made. A mount is `noexec` only where the engine can
 * say so: a tmpfs (`ephemeral`) takes the flag, but the engine's bind mounts
 * have no such option (Engine API 1.41), and an `inImage` path is not
 * mounted at all.
 */
export function refuseUnmountableLayout(
  layout: ResolvedContainerSandboxLayout,
  backend: string,
): void {
  for (const mount of planLayoutMounts(layout)) {
    if (!mount.noexec || mount.source.type === 'ephemeral') continue
    throw new SandboxControlRefusedError(
      `layout.${mountName(mount)}.noexec`,
      backend,
      mount.source.type === 'hostDir'
        ? "the Docker Engine cannot mount a host directory noexec; mount it noexec on the host (the sandbox's mount inherits that), or use an ephemeral source"
        : mount.source.type === 'volume'
          ? 'the Docker Engine cannot mount a named volume noexec (its volume mounts take no such option)'
          : `a ${mount.source.type} source is not mounted by the Docker Engine, so it cannot be made noexec`,
    )
  }
}

function mountName(mount: LayoutMountPlan): string {
  return mount.role === 'skill' ? `skills.${mount.skillId}` : mount.role
}

/**
 * tmpfs mounts: `/tmp`, and every `ephemeral` layout source, owned by the
 * sandbox's user, with a size cap so a sandbox cannot fill the engine's
 * memory or disk, no setuid and no device files. Programs on them may run
 * unless the config (`tmpfsNoexec`) or the layout mount (`noexec`) says
 * not: the engine makes a tmpfs `noexec` unless told `exec`. They live and
 * die with the container, so nothing is left behind when it goes.
 */
export function tmpfsMounts(
  config: Pick<ContainerBackendConfig, 'tmpfsSizeMb' | 'tmpfsNoexec'>,
  layout: ResolvedContainerSandboxLayout,
  user: { uid: number; gid: number },
): Record<string, string> {
  const execution = (noexec: boolean | undefined) => (noexec ? 'noexec' : 'exec')
  const mounts: Record<string, string> = {
    '/tmp': `rw,nosuid,nodev,${execution(config.tmpfsNoexec)},size=${(config.tmpfsSizeMb ?? DEFAULT_TMPFS_MB) * 1024 * 1024},mode=1777`,
  }
  for (const mount of planLayoutMounts(layout)) {
    if (mount.source.type !== 'ephemeral') continue
    const sizeMb = mount.source.sizeMb ?? DEFAULT_EPHEMERAL_SIZE_MB
    mounts[mount.containerPath] =
      `${mount.readOnly ? 'ro' : 'rw'},nosuid,nodev,${execution(mount.noexec)},size=${sizeMb * 1024 * 1024},uid=${user.uid},gid=${user.gid},mode=0755`
  }
  return mounts
}

/**
 * How `maxProcesses` is enforced: the sandbox user's RLIMIT_NPROC, which,
 * with a uid of its own, counts exactly that sandbox's processes and threads
 * (the agent and the init are root's, and do not count). The pids cgroup is a
 * backstop that also covers the agent: under gVisor it counts the sentry's
 * host threads instead (an idle sandbox already uses dozens), so it is set
 * generously there.
 */
export function processLimits(
  config: Pick<ContainerBackendConfig, 'runtime'>,
  maxProcesses: number,
  fileSizeBytes?: number,
): { PidsLimit: number; Ulimits: Array<{ Name: string; Soft: number; Hard: number }> } {
  const nproc = maxProcesses
  const pids =
    config.runtime === 'runsc'
      ? // Every guest task the sandbox user may have, plus the agent's and
        // the init's, so the guest limit is always met first
        // (a sentry that cannot make a host thread ends the whole sandbox).
        (nproc + AGENT_TASK_ALLOWANCE) * RUNSC_HOST_PIDS_PER_GUEST_PROCESS + RUNSC_HOST_PIDS_BASE
      : nproc + AGENT_TASK_ALLOWANCE
  return {
    // The kernel refuses a pids.max above PID_MAX_LIMIT (EINVAL); at that
    // ceiling the cgroup no longer binds, and RLIMIT_NPROC still does.
    PidsLimit: Math.min(pids, PID_MAX_LIMIT),
    Ulimits: [
      { Name: 'nproc', Soft: nproc, Hard: nproc },
      ...(fileSizeBytes === undefined
        ? []
        : [{ Name: 'fsize', Soft: fileSizeBytes, Hard: fileSizeBytes }]),
    ],
  }
}

/** The kernel's most pids on 64-bit (2^22), the largest pids.max it takes. */
const PID_MAX_LIMIT = 4_194_304

/** Host pids a gVisor sandbox needs: a base for the sentry, plus per guest process (ptrace platform). */
const RUNSC_HOST_PIDS_BASE = 160
const RUNSC_HOST_PIDS_PER_GUEST_PROCESS = 12

/**
 * The agent's settings, as its environment (the agent removes them before
 * anything runs). None of them is secret: the agent's secret comes as the
 * first line on its stdin instead.
 */
export function agentEnvironment(options: {
  readonly layout: ResolvedContainerSandboxLayout
  readonly workingDirectory: string
  readonly user: { uid: number; gid: number }
  readonly egressPort: number | undefined
  readonly lifetimeMs: number | undefined
  /** The agent's direct file socket (direct-socket.ts), where the host can reach it. */
  readonly directSocket?: string | undefined
  /** The agent's host-backed socket (direct-socket.ts, gVisor), where the host can reach it. */
  readonly hostSocket?: string | undefined
  /** cordon-launcher in the runtime volume, if it holds one ({@link AgentRuntime.launcher}). */
  readonly launcher?: string | undefined
  /** Sizes of the named volumes the layout mounts. */
  readonly volumeSizes?: VolumeSizes
  /** The agent outlives its attach (a detached sandbox): it ends at its lifetime. */
  readonly detached?: boolean
  /** libuv's pool size for the agent (gvisor-agent-threads.ts); absent, libuv's default. */
  readonly poolThreads?: number | undefined
}): string[] {
  const writable = writableRoots(options.layout)
  // The working directory first: the agent's default for a command without cwd.
  const roots = [
    ...(writable.includes(options.workingDirectory) ? [options.workingDirectory] : []),
    ...writable.filter((root) => root !== options.workingDirectory),
  ]
  const env: Record<string, string> = {
    CORDON_AGENT_LISTEN: 'stdio',
    CORDON_AGENT_SECRET_STDIN: '1',
    CORDON_AGENT_WRITE_ROOTS: roots.join(':'),
    CORDON_AGENT_READ_ROOTS: readableRoots(options.layout).join(':'),
    CORDON_AGENT_RUN_AS: `${options.user.uid}:${options.user.gid}`,
    ...(options.egressPort === undefined
      ? {}
      : { CORDON_AGENT_EGRESS_PORT: String(options.egressPort) }),
    ...(options.lifetimeMs === undefined
      ? {}
      : { CORDON_AGENT_LIFETIME_MS: String(options.lifetimeMs) }),
    ...(options.directSocket === undefined
      ? {}
      : { CORDON_AGENT_DIRECT_SOCKET: options.directSocket }),
    ...(options.hostSocket === undefined ? {} : { CORDON_AGENT_HOST_SOCKET: options.hostSocket }),
    ...(options.launcher === undefined ? {} : { CORDON_AGENT_LAUNCHER: options.launcher }),
    ...(options.detached ? { CORDON_AGENT_DETACHED: '1' } : {}),
    ...(options.poolThreads === undefined
      ? {}
      : { CORDON_AGENT_POOL_THREADS: String(options.poolThreads) }),
  }
  const sealed = sealedOutputPaths(options.layout)
  if (sealed.length > 0) env.CORDON_AGENT_SEAL_ROOTS = sealed.join(':')
  const handOvers = outputHandOvers(options.layout)
  if (handOvers.length > 0)
    env.CORDON_AGENT_HAND_OVER = handOvers
      .map(({ containerPath, to }) => `${containerPath}=${to.uid},${to.gid}`)
      .join(':')
  const owned = ownedVolumePaths(options.layout)
  if (owned.length > 0) env.CORDON_AGENT_OWN_ROOTS = owned.join(':')
  const caps = hostDirCaps(options.layout, options.volumeSizes)
  if (caps.length > 0)
    env.CORDON_AGENT_STORAGE_CAPS = caps.map((cap) => `${cap.containerPath}=${cap.bytes}`).join(':')
  return Object.entries(env).map(([key, value]) => `${key}=${value}`)
}

/**
 * Writable host directories: the host sees what the sandbox leaves there, so
 * the agent seals them when it ends (no FIFOs, sockets, links out or set-id
 * bits; see the agent's output-seal.ts).
 */
export function sealedOutputPaths(layout: ResolvedContainerSandboxLayout): string[] {
  return sealedMounts(layout).map((mount) => mount.containerPath)
}

/** The host directories behind {@link sealedOutputPaths}, as the host named them. */
export function sealedHostDirectories(layout: ResolvedContainerSandboxLayout): string[] {
  return sealedMounts(layout).flatMap((mount) =>
    mount.source.type === 'hostDir' ? [mount.source.hostPath] : [],
  )
}

function sealedMounts(layout: ResolvedContainerSandboxLayout) {
  return planLayoutMounts(layout).filter(
    (mount) => mount.source.type === 'hostDir' && !mount.readOnly,
  )
}

/**
 * Writable host directories whose host names who gets what the sandbox left
 * there (`handOverTo`); the others go to the directory's owner.
 */
export function outputHandOvers(
  layout: ResolvedContainerSandboxLayout,
): Array<{ containerPath: string; to: { uid: number; gid: number } }> {
  return planLayoutMounts(layout).flatMap((mount) =>
    mount.source.type === 'hostDir' && !mount.readOnly && mount.source.handOverTo
      ? [{ containerPath: mount.containerPath, to: mount.source.handOverTo }]
      : [],
  )
}

/** The named volumes a layout mounts, and how. */
export function volumeMounts(layout: ResolvedContainerSandboxLayout): VolumeMountRequest[] {
  return planLayoutMounts(layout).flatMap((mount) =>
    mount.source.type === 'volume' ? [{ name: mount.source.name, readOnly: mount.readOnly }] : [],
  )
}

/**
 * Container paths of the volumes mounted read-write: the agent hands their
 * trees to the sandbox's user before it starts, whatever uid wrote them last.
 */
export function ownedVolumePaths(layout: ResolvedContainerSandboxLayout): string[] {
  return planLayoutMounts(layout)
    .filter((mount) => mount.source.type === 'volume' && !mount.readOnly)
    .map((mount) => mount.containerPath)
}

/** Sizes of named volumes in MiB, by name, as their engine labels say (named-volumes.ts). */
export type VolumeSizes = ReadonlyMap<string, number>

/**
 * Writable host directories and read-write named volumes, and the most disk
 * each may take. Neither has a size of its own on the engine (a bind mount;
 * a local-driver volume is a directory), so the cap is held by the agent
 * (its storage watch ends the sandbox past it) and by the kernel's file size
 * limit ({@link fileSizeLimit}).
 */
export function hostDirCaps(
  layout: ResolvedContainerSandboxLayout,
  volumeSizes: VolumeSizes = new Map(),
): Array<{ containerPath: string; bytes: number }> {
  return planLayoutMounts(layout).flatMap((mount) => {
    if (mount.readOnly) return []
    if (mount.source.type === 'hostDir')
      return [
        {
          containerPath: mount.containerPath,
          bytes: (mount.source.sizeMb ?? DEFAULT_HOST_DIR_SIZE_MB) * 1024 * 1024,
        },
      ]
    if (mount.source.type === 'volume') {
      const sizeMb = volumeSizes.get(mount.source.name)
      if (sizeMb === undefined)
        throw new TypeError(`hostDirCaps: the size of volume ${mount.source.name} was not read`)
      return [{ containerPath: mount.containerPath, bytes: sizeMb * 1024 * 1024 }]
    }
    return []
  })
}

/**
 * RLIMIT_FSIZE for everything in the container when it has a capped host
 * directory: the largest such cap, so that a lone writer is stopped at the
 * cap exactly by the kernel (EFBIG, or SIGXFSZ), not by the agent's next
 * measurement. The limit is per process, not per mount, so it holds for
 * every file in the sandbox: with a 1 GiB cap (the default), no file in its
 * `/tmp` or `ephemeral` mounts can be larger either.
 */
export function fileSizeLimit(
  layout: ResolvedContainerSandboxLayout,
  volumeSizes: VolumeSizes = new Map(),
): number | undefined {
  const caps = hostDirCaps(layout, volumeSizes)
  return caps.length === 0 ? undefined : Math.max(...caps.map((cap) => cap.bytes))
}

/**
 * The sandbox container, on the hardened base every cordon container shares
 * ({@link hardenedHostConfig}). Its entry process is cordon's agent (under
 * the init), started from the runtime volume and reached only over the
 * attached stdin and stdout, with `StdinOnce` so the container ends when its
 * host goes away (and is then removed).
 *
 * The agent runs as root with the capabilities of {@link agentCapabilities},
 * the only ones given back; commands run as the sandbox's user with none at
 * all. On top of the base: tmpfs `/tmp`, the process limits of
 * {@link processLimits}, a CPU limit, and no network interface but loopback.
 */
export function containerSpec(options: {
  readonly name: string
  readonly config: ContainerBackendConfig
  readonly request: SandboxCreateRequest
  /** The image to run (a snapshot's); default: the config's. */
  readonly image?: string
  readonly runtime: AgentRuntime
  readonly mounts: MountSettings[]
  readonly tmpfs: Record<string, string>
  readonly labels: Record<string, string>
  readonly env: string[]
  /** The engine runtime, where it is not the config's (direct-socket.ts HOST_SOCKETS_RUNTIME). */
  readonly engineRuntime?: string
  /** Cores the sandbox may use (see cpu-placement.ts); undefined for all. */
  readonly cpuSet: string | undefined
  /** RLIMIT_FSIZE, in bytes ({@link fileSizeLimit}); undefined for none. */
  readonly fileSizeBytes: number | undefined
  /** Whether the agent seals writable host directories and hands their contents over when it ends. */
  readonly handsOverOutputs: boolean
  /** Whether the agent hands read-write volumes to the sandbox's user before it starts. */
  readonly ownsVolumes?: boolean
}): ContainerCreateOptions {
  const { config, request } = options
  const memoryBytes = containerMemoryLimitMb(config, request.memoryLimitMb) * 1024 * 1024
  const limits = processLimits(config, request.maxProcesses, options.fileSizeBytes)
  return {
    name: options.name,
    Image: options.image ?? config.image,
    Entrypoint: options.runtime.agentEntrypointWith(agentNodeOptions(config.runtime), {
      fromSnapshot: agentStartsFromSnapshot(config.runtime),
      startupClock: agentUsesStartupClock(config.runtime),
    }),
    Cmd: [],
    User: '0:0',
    WorkingDir: '/',
    Env: options.env,
    Labels: options.labels,
    AttachStdin: true,
    AttachStdout: true,
    AttachStderr: true,
    OpenStdin: true,
    StdinOnce: true,
    Tty: false,
    NetworkDisabled: true,
    StopTimeout: 1,
    HostConfig: hardenedHostConfig({
      networkMode: 'none',
      memoryBytes,
      pidsLimit: limits.PidsLimit,
      mounts: options.mounts,
      capAdd: agentCapabilities(options.handsOverOutputs, options.ownsVolumes === true),
      extra: {
        // `docker` leaves the choice to the engine's default runtime.
        ...(options.engineRuntime !== undefined
          ? { Runtime: options.engineRuntime }
          : config.runtime === 'runsc' || config.runtime === 'runc'
            ? { Runtime: config.runtime }
            : {}),
        Tmpfs: options.tmpfs,
        Ulimits: limits.Ulimits,
        NanoCpus: Math.round((config.cpus ?? DEFAULT_CPUS) * 1e9),
        ...(options.cpuSet === undefined ? {} : { CpusetCpus: options.cpuSet }),
      },
    }),
  }
}

/**
 * What the agent may do as root, and why each: start commands as the
 * sandbox's user (SETUID, SETGID) and signal them (KILL); measure
 * everything the sandbox stores whatever modes it set (DAC_OVERRIDE, for
 * the storage caps and `stats()`) and read its processes' descriptor tables
 * and maps for the deleted files they hold, a process that made itself
 * non-dumpable included (SYS_PTRACE); with a writable host directory, when
 * it ends, defuse what the sandbox left there and hand it to the directory's
 * owner (FOWNER, CHOWN); with a read-write named volume, hand its tree to
 * the sandbox's user before anything of the sandbox runs (CHOWN, and
 * FOWNER: changing the owner of a set-id file an earlier sandbox left
 * clears its bit, a mode change Linux allows root only with FOWNER, so
 * without it that file kept every later sandbox from starting under runc).
 * Commands get none of these: they run as another uid, which clears them,
 * and the launcher's filter closes the three system calls the engine's
 * profile opens to a container with SYS_PTRACE (kcmp, pidfd_getfd,
 * process_madvise). No capability here lets the agent reach past the
 * container (CAP_DAC_READ_SEARCH, which would open `open_by_handle_at`, is
 * deliberately not one of them).
 */
export function agentCapabilities(handsOverOutputs: boolean, ownsVolumes = false): string[] {
  return [
    'SETUID',
    'SETGID',
    'KILL',
    'DAC_OVERRIDE',
    'SYS_PTRACE',
    ...(handsOverOutputs || ownsVolumes ? ['FOWNER', 'CHOWN'] : []),
  ]
}
