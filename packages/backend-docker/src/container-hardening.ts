import type { ContainerCreateOptions, MountSettings } from 'dockerode'

type HostConfig = NonNullable<ContainerCreateOptions['HostConfig']>

/** The settings the hardened base owns; a caller's extras can never set them. */
type HardeningKey =
  | 'NetworkMode'
  | 'CapDrop'
  | 'CapAdd'
  | 'SecurityOpt'
  | 'ReadonlyRootfs'
  | 'Memory'
  | 'MemorySwap'
  | 'PidsLimit'
  | 'Init'
  | 'Privileged'
  | 'IpcMode'
  | 'Mounts'
  | 'RestartPolicy'
  | 'AutoRemove'
  | 'LogConfig'

/**
 * The host configuration every container cordon creates starts from: the
 * sandbox, the egress gateway and the huge-page keeper. One place, so a
 * hardening added here reaches all of them and none can be made without it:
 *
 * - every capability dropped, and only `capAdd` given back (on purpose: the
 *   sandbox's agent; the others get none);
 * - no-new-privileges (no setuid binary or file capability takes effect),
 *   no privileged mode, and the engine's default seccomp profile (no seccomp
 *   option is ever passed);
 * - a read-only root filesystem;
 * - a memory limit with swap equal to it (no extra swap) and a pids limit;
 * - an init as PID 1, which reaps orphans and forwards signals;
 * - a private IPC namespace;
 * - no log files (the engine would otherwise keep whatever the process
 *   writes, unbounded, on the host's disk);
 * - removed by the engine when it stops, never restarted.
 *
 * `extra` adds what one kind of container needs (tmpfs mounts, CPU limits,
 * a runtime); its type leaves out every setting above, so it cannot undo one.
 */
export function hardenedHostConfig(options: {
  readonly networkMode: string
  readonly memoryBytes: number
  readonly pidsLimit: number
  readonly mounts: MountSettings[]
  readonly capAdd?: readonly string[]
  readonly extra?: Omit<HostConfig, HardeningKey>
}): HostConfig {
  const base: Pick<HostConfig, HardeningKey> = {
    NetworkMode: options.networkMode,
    CapDrop: ['ALL'],
    ...(options.capAdd && options.capAdd.length > 0 ? { CapAdd: [...options.capAdd] } : {}),
    SecurityOpt: ['no-new-privileges:true'],
    ReadonlyRootfs: true,
    Memory: options.memoryBytes,
    MemorySwap: options.memoryBytes,
    PidsLimit: options.pidsLimit,
    Init: true,
    Privileged: false,
    IpcMode: 'private',
    Mounts: options.mounts,
    RestartPolicy: { Name: 'no' },
    AutoRemove: true,
    LogConfig: { Type: 'none', Config: {} },
  }
  // The base last, so that even an untyped caller's extra cannot override it.
  return { ...options.extra, ...base }
}
