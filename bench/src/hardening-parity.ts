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
    outputsMount: outputs ? `${outputs.Type} rw=${outputs.RW} driver=${outputs.Driver}` : 'missing',
    outputsVolumeOptions: JSON.stringify(volumeOptions ?? null),
  }
}

/** `[]` when `peer` matches `reference` on every hardening field, else one line per difference. */
export function fingerprintDifferences(reference: Fingerprint, peer: Fingerprint): string[] {
  return Object.keys(reference)
    .filter((key) => reference[key] !== peer[key])
    .map((key) => `${key}: cordon ${reference[key]}, peer ${peer[key]}`)
}
