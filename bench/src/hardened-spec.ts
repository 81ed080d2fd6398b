/**
 * The container every peer runs, written out by hand so the comparison is fair:
 * the same fields, values and workspace that `@cordon/backend-docker` sends for
 * a default sandbox (see packages/backend-docker/src/container-spec.ts and
 * `DockerBackend.createVolume`), i.e. user 1000:1000, every capability dropped,
 * no-new-privileges, read-only root filesystem, 64 MiB tmpfs `/tmp`, pids 256,
 * 512 MiB memory with no extra swap, one CPU, init, private IPC, no network, no
 * log driver, and a size-capped tmpfs volume at the outputs path.
 * `hardening-parity.ts` compares the engine's view of each peer's container
 * with cordon's at run time, so a drift here shows up in the results.
 */
import type Docker from 'dockerode'
import type { EngineRuntime } from './bench-runtime.js'
import { BENCH_IMAGE, BENCH_LABELS } from './engine.js'

export const SANDBOX_USER = '1000:1000'
export const OUTPUTS_PATH = '/mnt/user-data/outputs'
const MEMORY_BYTES = 512 * 1024 * 1024
const PIDS_LIMIT = 256
const NANO_CPUS = 1e9
const TMP_TMPFS = `rw,nosuid,nodev,size=${64 * 1024 * 1024},mode=1777`
/** The local driver's tmpfs options cordon uses for an `ephemeral` outputs mount. */
export const WORKSPACE_VOLUME_OPTIONS: Record<string, string> = {
  type: 'tmpfs',
  device: 'tmpfs',
  o: 'size=1024m,uid=1000,gid=1000,mode=0755,nosuid,nodev',
}
export const KEEP_ALIVE = ['sleep', '2147483647']

/**
 * `runtime` undefined leaves the engine's default (runc), as a host that sets
 * nothing gets; `runsc` is gVisor.
 */
export function hardenedHostConfig(
  mounts: Docker.MountSettings[],
  runtime?: EngineRuntime,
): Docker.HostConfig {
  return {
    ...(runtime ? { Runtime: runtime } : {}),
    NetworkMode: 'none',
    CapDrop: ['ALL'],
    SecurityOpt: ['no-new-privileges:true'],
    ReadonlyRootfs: true,
    Tmpfs: { '/tmp': TMP_TMPFS },
    PidsLimit: PIDS_LIMIT,
    Memory: MEMORY_BYTES,
    MemorySwap: MEMORY_BYTES,
    NanoCpus: NANO_CPUS,
    Init: true,
    Privileged: false,
    IpcMode: 'private',
    Mounts: mounts,
    RestartPolicy: { Name: 'no' },
    LogConfig: { Type: 'none', Config: {} },
  }
}

/** A mount of a volume that already exists (the floor creates it first, as cordon does). */
export function existingVolumeMount(volume: string): Docker.MountSettings {
  return { Type: 'volume', Source: volume, Target: OUTPUTS_PATH, ReadOnly: false }
}

/**
 * The same tmpfs volume, created by the engine as part of container create
 * (one API call fewer than creating it first): what testcontainers and the CLI
 * get, which can only favour them.
 */
export function inlineVolumeMount(volume: string): Docker.MountSettings {
  return {
    Type: 'volume',
    Source: volume,
    Target: OUTPUTS_PATH,
    ReadOnly: false,
    VolumeOptions: {
      Labels: BENCH_LABELS,
      DriverConfig: { Name: 'local', Options: WORKSPACE_VOLUME_OPTIONS },
    },
  } as Docker.MountSettings
}

export function hardenedCreateOptions(
  name: string,
  mounts: Docker.MountSettings[],
  runtime?: EngineRuntime,
): Docker.ContainerCreateOptions {
  return {
    name,
    Image: BENCH_IMAGE,
    Entrypoint: KEEP_ALIVE,
    Cmd: [],
    User: SANDBOX_USER,
    WorkingDir: OUTPUTS_PATH,
    Env: [],
    Labels: BENCH_LABELS,
    AttachStdin: false,
    AttachStdout: false,
    AttachStderr: false,
    Tty: false,
    OpenStdin: false,
    NetworkDisabled: true,
    StopTimeout: 1,
    HostConfig: hardenedHostConfig(mounts, runtime),
  }
}

/** `docker run -d` arguments for the same container, the volume made inline by `--mount`. */
export function dockerRunArgs(name: string, volume: string, runtime?: EngineRuntime): string[] {
  const volumeOptions = Object.entries(WORKSPACE_VOLUME_OPTIONS).map(([key, value]) =>
    // The CLI's --mount value is CSV: a field that contains commas is quoted.
    value.includes(',') ? `"volume-opt=${key}=${value}"` : `volume-opt=${key}=${value}`,
  )
  const labels = Object.entries(BENCH_LABELS)
  return [
    'run',
    '-d',
    '--name',
    name,
    ...(runtime ? ['--runtime', runtime] : []),
    ...labels.flatMap(([key, value]) => ['--label', `${key}=${value}`]),
    '--user',
    SANDBOX_USER,
    '--workdir',
    OUTPUTS_PATH,
    '--network',
    'none',
    '--cap-drop',
    'ALL',
    '--security-opt',
    'no-new-privileges:true',
    '--read-only',
    '--tmpfs',
    `/tmp:${TMP_TMPFS}`,
    '--pids-limit',
    String(PIDS_LIMIT),
    '--memory',
    String(MEMORY_BYTES),
    '--memory-swap',
    String(MEMORY_BYTES),
    '--cpus',
    '1',
    '--init',
    '--ipc',
    'private',
    '--restart',
    'no',
    '--log-driver',
    'none',
    '--stop-timeout',
    '1',
    '--mount',
    [
      'type=volume',
      `src=${volume}`,
      `dst=${OUTPUTS_PATH}`,
      'volume-driver=local',
      ...labels.map(([key, value]) => `volume-label=${key}=${value}`),
      ...volumeOptions,
    ].join(','),
    '--entrypoint',
    KEEP_ALIVE[0]!,
    BENCH_IMAGE,
    ...KEEP_ALIVE.slice(1),
  ]
}
