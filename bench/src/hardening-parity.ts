/**
 * Checks, from the engine's side, that every peer's container carries the same
 * hardening as cordon's: a peer running a softer container would win for the
 * wrong reason.
 */
import { docker } from './engine.js'

type Fingerprint = Record<string, string>

export async function hardeningFingerprint(containerId: string): Promise<Fingerprint> {
  const info = await docker.getContainer(containerId).inspect()
  const host = info.HostConfig as typeof info.HostConfig & {
    Init?: boolean
    ReadonlyRootfs?: boolean
    NanoCpus?: number
    Tmpfs?: Record<string, string>
  }
  const outputs = info.Mounts.find((mount) => mount.Destination === '/mnt/user-data/outputs')
  const volumeOptions = outputs?.Name
    ? (await docker.getVolume(outputs.Name).inspect()).Options
    : undefined
  return {
    user: info.Config.User,
    readOnlyRootfs: String(host.ReadonlyRootfs),
    capDrop: JSON.stringify(host.CapDrop),
    capAdd: JSON.stringify(host.CapAdd ?? null),
    securityOpt: JSON.stringify(host.SecurityOpt),
    tmpfs: JSON.stringify(host.Tmpfs),
    pidsLimit: String(host.PidsLimit),
    memory: String(host.Memory),
    memorySwap: String(host.MemorySwap),
    nanoCpus: String(host.NanoCpus),
    init: String(host.Init),
    privileged: String(host.Privileged),
    ipcMode: String(host.IpcMode),
    networkMode: String(host.NetworkMode),
    pidMode: String(host.PidMode),
    // The engine reports "runc" for a container created without a runtime.
    runtime: String(host.Runtime || 'runc'),
    outputsMount: outputs ? `${outputs.Type} rw=${outputs.RW} driver=${outputs.Driver}` : 'missing',
    outputsVolumeOptions: JSON.stringify(volumeOptions ?? null),
  }
}

/**
 * Fields where cordon's container differs from the peers' by design, each
 * with the reason; they are left out of the comparison and listed in the
 * report instead.
 */
export const DIFFERENT_BY_DESIGN: Readonly<Record<string, string>> = {
  user: "cordon's entry process is its agent, as root; every command runs as a uid of the sandbox's own with no capabilities (the peers' commands run as 1000:1000 with none)",
  capAdd:
    'the agent alone holds SETUID, SETGID and KILL, to start commands as the sandbox user and signal them',
  memory: 'cordon adds 48 MiB for its agent to the 512 MiB its commands get',
  memorySwap: 'equal to memory, as for the peers',
  pidsLimit:
    "cordon's process limit is the sandbox user's RLIMIT_NPROC (32); the pids cgroup is only a backstop",
  tmpfs:
    "cordon's outputs are a tmpfs mount; the peers' are a tmpfs volume, because the engine's archive API (their file path) cannot see a tmpfs mount",
  outputsMount: 'see tmpfs',
  outputsVolumeOptions: 'see tmpfs',
}

/** `[]` when `peer` matches `reference` on every hardening field, else one line per difference. */
export function fingerprintDifferences(reference: Fingerprint, peer: Fingerprint): string[] {
  return Object.keys(reference)
    .filter((key) => !(key in DIFFERENT_BY_DESIGN) && reference[key] !== peer[key])
    .map((key) => `${key}: cordon ${reference[key]}, peer ${peer[key]}`)
}
