import {
  type ContainerBackendConfig,
  type ResolvedContainerSandboxLayout,
  SandboxControlRefusedError,
} from '@cordon/core'
import {
  type LayoutMountPlan,
  planLayoutMounts,
  type SandboxCreateRequest,
} from '@cordon/core/backend'
import type { ContainerCreateOptions, MountSettings } from 'dockerode'

export const DEFAULT_USER = '1000:1000'
export const DEFAULT_CPUS = 1
export const DEFAULT_TMPFS_MB = 64
/** Keeps the container alive between execs; `sleep` is the one command the image must have. */
export const KEEP_ALIVE = ['sleep', '2147483647'] as const

export interface WorkspaceVolume {
  readonly name: string
  readonly containerPath: string
  readonly readOnly: boolean
  readonly sizeMb: number
}

/** Size cap of an `ephemeral` mount that does not set `sizeMb`. */
export const DEFAULT_EPHEMERAL_SIZE_MB = 1024

/** Names the per-sandbox volume that backs an `ephemeral` mount. */
export function workspaceVolumeName(sandboxId: string, containerPath: string): string {
  return `cordon-${sandboxId}${containerPath.replace(/[^a-zA-Z0-9]+/g, '-')}`
}

/** The volumes `ephemeral` mounts need, created before the container. */
export function workspaceVolumes(
  sandboxId: string,
  layout: ResolvedContainerSandboxLayout,
): WorkspaceVolume[] {
  return planLayoutMounts(layout)
    .filter((mount) => mount.source.type === 'ephemeral')
    .map((mount) => ({
      name: workspaceVolumeName(sandboxId, mount.containerPath),
      containerPath: mount.containerPath,
      readOnly: mount.readOnly,
      sizeMb:
        (mount.source.type === 'ephemeral' ? mount.source.sizeMb : undefined) ??
        DEFAULT_EPHEMERAL_SIZE_MB,
    }))
}

/**
 * The engine-side mounts for a layout. Only sources a Docker Engine can provide
 * are accepted; the others are refused by name rather than silently skipped,
 * and a host directory that would expose the engine's socket is refused.
 */
export function layoutMounts(
  sandboxId: string,
  layout: ResolvedContainerSandboxLayout,
  backend: string,
  engineSocketPath: string | undefined,
): MountSettings[] {
  return planLayoutMounts(layout).map((mount) =>
    engineMount(sandboxId, mount, backend, engineSocketPath),
  )
}

function engineMount(
  sandboxId: string,
  mount: LayoutMountPlan,
  backend: string,
  engineSocketPath: string | undefined,
): MountSettings {
  {
    const source = mount.source
    switch (source.type) {
      case 'hostDir': {
        if (
          engineSocketPath &&
          (engineSocketPath === source.hostPath ||
            engineSocketPath.startsWith(`${source.hostPath.replace(/\/$/, '')}/`))
        ) {
          throw new SandboxControlRefusedError(
            `layout.${mount.role}.source`,
            backend,
            `host directory ${source.hostPath} contains the engine socket ${engineSocketPath}; mounting it would hand the sandbox the engine`,
          )
        }
        return {
          Type: 'bind',
          Source: source.hostPath,
          Target: mount.containerPath,
          ReadOnly: mount.readOnly,
        }
      }
      case 'ephemeral':
        return {
          Type: 'volume',
          Source: workspaceVolumeName(sandboxId, mount.containerPath),
          Target: mount.containerPath,
          ReadOnly: mount.readOnly,
        }
      case 'inImage':
        throw new SandboxControlRefusedError(
          `layout.${mount.role}.source`,
          backend,
          'an "inImage" path lives on the read-only root filesystem, so the file API could not write it; use "ephemeral" or "hostDir"',
        )
      case 'azureFileShare':
        throw new SandboxControlRefusedError(
          `layout.${mount.role}.source`,
          backend,
          'Azure file shares are mounted by ACI, not by a Docker Engine',
        )
      default:
        throw new SandboxControlRefusedError(
          `layout.${mount.role}.source`,
          backend,
          'unknown mount source',
        )
    }
  }
}

/**
 * How `maxProcesses` is enforced. Under runc the pids cgroup counts exactly the
 * sandbox's processes. Under gVisor the pids cgroup counts the sentry's host
 * threads and processes instead (an idle sandbox already uses dozens), so the
 * limit inside the sandbox is the guest kernel's RLIMIT_NPROC, which gVisor
 * keeps per sandbox, and the pids cgroup is kept only as a generous host-side
 * backstop. (RLIMIT_NPROC is not used under runc: there it counts every
 * process of the uid on the host, across sandboxes.)
 */
export function processLimits(
  config: Pick<ContainerBackendConfig, 'runtime'>,
  maxProcesses: number,
): { PidsLimit: number; Ulimits?: Array<{ Name: string; Soft: number; Hard: number }> } {
  if (config.runtime !== 'runsc') return { PidsLimit: maxProcesses }
  return {
    PidsLimit: maxProcesses * RUNSC_HOST_PIDS_PER_GUEST_PROCESS + RUNSC_HOST_PIDS_BASE,
    Ulimits: [{ Name: 'nproc', Soft: maxProcesses, Hard: maxProcesses }],
  }
}

/** Host pids a gVisor sandbox needs: a base for the sentry, plus per guest process (ptrace platform). */
const RUNSC_HOST_PIDS_BASE = 128
const RUNSC_HOST_PIDS_PER_GUEST_PROCESS = 12

/**
 * The hardened container: non-root, every capability dropped,
 * no-new-privileges, read-only root filesystem with a small tmpfs `/tmp`,
 * pids, memory (swap equal to memory, so no extra swap) and CPU limits, the
 * engine's default seccomp profile (cordon never passes a seccomp option),
 * an init process, no privileged mode, private namespaces and no network.
 */
export function containerSpec(options: {
  readonly name: string
  readonly config: ContainerBackendConfig
  readonly request: SandboxCreateRequest
  readonly layout: ResolvedContainerSandboxLayout
  readonly mounts: MountSettings[]
  readonly labels: Record<string, string>
  readonly networkMode: string
  /** Engine runtime name; undefined means the engine's default (runc). */
  readonly runtimeName: string | undefined
  /** HTTP_PROXY and friends, for sandboxes behind the egress gateway. */
  readonly proxyEnv: Readonly<Record<string, string>>
}): ContainerCreateOptions {
  const { config, request } = options
  const memoryBytes = request.memoryLimitMb * 1024 * 1024
  return {
    name: options.name,
    Image: config.image,
    Entrypoint: [...KEEP_ALIVE],
    Cmd: [],
    User: config.user ?? DEFAULT_USER,
    WorkingDir: request.workingDirectory,
    Env: Object.entries({ ...request.env, ...options.proxyEnv }).map(
      ([key, value]) => `${key}=${value}`,
    ),
    Labels: options.labels,
    AttachStdin: false,
    AttachStdout: false,
    AttachStderr: false,
    Tty: false,
    OpenStdin: false,
    NetworkDisabled: options.networkMode === 'none',
    StopTimeout: 1,
    HostConfig: {
      ...(options.runtimeName ? { Runtime: options.runtimeName } : {}),
      NetworkMode: options.networkMode,
      CapDrop: ['ALL'],
      SecurityOpt: ['no-new-privileges:true'],
      ReadonlyRootfs: true,
      Tmpfs: {
        '/tmp': `rw,nosuid,nodev,size=${(config.tmpfsSizeMb ?? DEFAULT_TMPFS_MB) * 1024 * 1024},mode=1777`,
      },
      ...processLimits(config, request.maxProcesses),
      Memory: memoryBytes,
      MemorySwap: memoryBytes,
      NanoCpus: Math.round((config.cpus ?? DEFAULT_CPUS) * 1e9),
      Init: true,
      Privileged: false,
      IpcMode: 'private',
      Mounts: options.mounts,
      RestartPolicy: { Name: 'no' },
      LogConfig: { Type: 'none', Config: {} },
    },
  }
}

/**
 * The hardening of cordon's own service containers (the egress gateway and
 * relays): non-root by the caller's `User`, no capabilities,
 * no-new-privileges, read-only root, memory without extra swap, a pids
 * limit, an init process and no log files. Kept in one place so a change to
 * it reaches every service container.
 */
export function serviceHostConfig(options: {
  readonly networkMode: string
  readonly memoryMb: number
  readonly pidsLimit: number
  readonly mounts: MountSettings[]
}): NonNullable<ContainerCreateOptions['HostConfig']> {
  const memory = options.memoryMb * 1024 * 1024
  return {
    NetworkMode: options.networkMode,
    CapDrop: ['ALL'],
    SecurityOpt: ['no-new-privileges:true'],
    ReadonlyRootfs: true,
    Memory: memory,
    MemorySwap: memory,
    PidsLimit: options.pidsLimit,
    Init: true,
    Mounts: options.mounts,
    LogConfig: { Type: 'none', Config: {} },
  }
}
