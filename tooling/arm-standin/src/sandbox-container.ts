import { randomInt } from 'node:crypto'
import { chmod, mkdir, rename, rm, writeFile } from 'node:fs/promises'
import { join } from 'node:path'
import type Dockerode from 'dockerode'
import {
  AGENT_PROGRAM_IN_IMAGE,
  ENTRYPOINT_IN_IMAGE,
  profileEnvironment,
  type StandinProfileSpec,
} from './standin-profile.js'

export interface SandboxContainerSpec {
  readonly name: string
  readonly profile: StandinProfileSpec
  /** The `--internal` network that plays the pool's subnet. */
  readonly networkName: string
  /** Host directory that is mounted read-only as the container's config map. */
  readonly configMapDir: string
  readonly agentProgramPath: string
  readonly entrypointPath: string
  readonly labels: Readonly<Record<string, string>>
}

/** One started container: what a warm container group of the pool is here. */
export interface SandboxContainer {
  readonly containerId: string
  readonly name: string
  /** Its address on the pool's network, which the host can reach. */
  readonly ip: string
  /** Writes a config-map value the way ACI applies one: the file appears whole, without a restart. */
  setConfigMapValue(key: string, value: string): Promise<void>
  /** Whether its process still runs (an entrypoint that exited leaves the group Stopped, as in ACI). */
  isRunning(): Promise<boolean>
  remove(): Promise<void>
}

/**
 * Starts one container of the pool, hardened the way a cordon sandbox must
 * be: non-root, every capability dropped, no-new-privileges, read-only root
 * filesystem, tmpfs for `/tmp` and for each of the profile's `emptyDir`
 * volumes (the latter not noexec, as in ACI), memory limit without extra
 * swap, CPU limit, the engine's default seccomp profile, no privileged
 * mode, no host namespaces, the engine socket never mounted. Its only network is the pool's `--internal` network.
 *
 * Two choices mirror ACI rather than the Docker backend:
 * - No init process: ACI runs the profile's command as PID 1, so the
 *   entrypoint has to reap orphans itself, and this is where it is tested.
 * - A user id of its own: in ACI every group has its own kernel, so the
 *   process limit the entrypoint sets (`ulimit -u`, counted per user) covers
 *   exactly one sandbox. Here all containers share the host's kernel, and a
 *   per-container uid keeps those counts apart.
 * A pids limit twice the profile's stays as a backstop for the shared host.
 */
export async function startSandboxContainer(
  docker: Dockerode,
  spec: SandboxContainerSpec,
): Promise<SandboxContainer> {
  const { profile } = spec
  const uid = randomInt(200_000, 2_000_000_000)
  await mkdir(spec.configMapDir, { recursive: true, mode: 0o755 })
  await chmod(spec.configMapDir, 0o755)
  const memoryBytes = profile.memoryMb * 1024 * 1024
  const tmpfs: Record<string, string> = { '/tmp': 'rw,nosuid,nodev,size=64m,mode=1777' }
  // `exec`: the engine makes a tmpfs noexec unless told, and ACI's emptyDir
  // volumes have no noexec option: programs built there run.
  for (const path of profile.emptyDirs)
    tmpfs[path] = `rw,nosuid,nodev,exec,size=1024m,uid=${uid},gid=${uid},mode=0755`
  const container = await docker.createContainer({
    name: spec.name,
    Image: profile.image,
    User: `${uid}:${uid}`,
    Cmd: ['/bin/sh', ENTRYPOINT_IN_IMAGE],
    WorkingDir: '/',
    Env: Object.entries(profileEnvironment(profile)).map(([name, value]) => `${name}=${value}`),
    Labels: { ...spec.labels },
    HostConfig: {
      Binds: [
        `${spec.agentProgramPath}:${AGENT_PROGRAM_IN_IMAGE}:ro`,
        `${spec.entrypointPath}:${ENTRYPOINT_IN_IMAGE}:ro`,
        `${spec.configMapDir}:/mnt/configmap/${profile.containerName}:ro`,
      ],
      ReadonlyRootfs: true,
      Tmpfs: tmpfs,
      CapDrop: ['ALL'],
      SecurityOpt: ['no-new-privileges'],
      NetworkMode: spec.networkName,
      PidsLimit: profile.maxProcesses * 2,
      Memory: memoryBytes,
      MemorySwap: memoryBytes,
      NanoCpus: Math.round(profile.cpus * 1e9),
      Init: false,
      Privileged: false,
    },
  })
  const remove = async (): Promise<void> => {
    await container.remove({ force: true, v: true }).catch((error: { statusCode?: number }) => {
      if (error?.statusCode !== 404) throw error
    })
    await rm(spec.configMapDir, { recursive: true, force: true })
  }
  try {
    await container.start()
    const info = await container.inspect()
    const ip = info.NetworkSettings.Networks[spec.networkName]?.IPAddress
    if (!ip) throw new Error(`container ${spec.name} got no address on ${spec.networkName}`)
    return {
      containerId: container.id,
      name: spec.name,
      ip,
      async setConfigMapValue(key, value) {
        // Rename is atomic, so the entrypoint never sees half a secret.
        const staged = join(spec.configMapDir, `.${key}.staged`)
        await writeFile(staged, value, { mode: 0o444 })
        await rename(staged, join(spec.configMapDir, key))
      },
      async isRunning() {
        const now = await container.inspect().catch(() => undefined)
        return now?.State?.Running === true
      },
      remove,
    }
  } catch (error) {
    await remove().catch(() => {})
    throw error
  }
}
