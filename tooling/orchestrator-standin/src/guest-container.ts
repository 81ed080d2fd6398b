import { chmod, chown, mkdir, rm, writeFile } from 'node:fs/promises'
import { join } from 'node:path'
import type Dockerode from 'dockerode'

/** Where the guest sees its run directory (agent socket, secret file). */
export const GUEST_RUN_DIR = '/run/cordon'
export const GUEST_AGENT_PROGRAM = '/opt/cordon/cordon-agent.mjs'
export const GUEST_OUTPUTS_DIR = '/mnt/user-data/outputs'
/** The unprivileged user every guest process runs as. */
export const GUEST_UID = 1000

export interface GuestSpec {
  readonly sandboxId: string
  readonly image: string
  readonly memoryLimitMb: number
  readonly maxProcesses: number
  readonly agentSecret: string
  readonly labels: Readonly<Record<string, string>>
  /** Host directory for this guest; its `run/` subdirectory is the guest's run directory. */
  readonly hostDir: string
  readonly agentProgramPath: string
  readonly tmpSizeMb: number
  readonly outputsSizeMb: number
  readonly cpus: number
}

export interface Guest {
  readonly containerId: string
  /** Host path of the agent's unix socket. */
  readonly agentSocketPath: string
  remove(): Promise<void>
}

const isRoot = typeof process.getuid === 'function' && process.getuid() === 0

/**
 * Starts one guest: the real cordon agent in a container hardened the way a
 * cordon sandbox must be (non-root, every capability dropped,
 * no-new-privileges, read-only root filesystem, tmpfs scratch and outputs, no
 * network at all, pids and memory limits with no extra swap, an init process).
 * Memory and process limits are the guest's, so the conformance suite's
 * memory bomb and fork bomb hit real kernel limits.
 *
 * The secret reaches the agent as a file in the run directory, which the agent
 * deletes after reading; it is never in the container's environment or config.
 */
export async function startGuest(docker: Dockerode, spec: GuestSpec): Promise<Guest> {
  const runDir = join(spec.hostDir, 'run')
  await mkdir(runDir, { recursive: true, mode: 0o700 })
  // The agent (uid 1000) creates its socket here and removes the secret file.
  if (isRoot) await chown(runDir, GUEST_UID, GUEST_UID)
  else await chmod(runDir, 0o777)
  const secretFile = join(runDir, 'secret')
  await writeFile(secretFile, spec.agentSecret, { mode: 0o400 })
  if (isRoot) await chown(secretFile, GUEST_UID, GUEST_UID)
  else await chmod(secretFile, 0o444)

  const memoryBytes = spec.memoryLimitMb * 1024 * 1024
  const container = await docker.createContainer({
    name: `cordon-standin-${spec.sandboxId}`,
    Image: spec.image,
    User: `${GUEST_UID}:${GUEST_UID}`,
    Cmd: ['node', GUEST_AGENT_PROGRAM],
    WorkingDir: '/',
    Env: [
      `CORDON_AGENT_LISTEN=unix:${GUEST_RUN_DIR}/agent.sock`,
      `CORDON_AGENT_SECRET_FILE=${GUEST_RUN_DIR}/secret`,
      `CORDON_AGENT_WRITE_ROOTS=${GUEST_OUTPUTS_DIR}`,
      // Root on the host reaches any socket; anyone else needs it open (the secret still guards it).
      `CORDON_AGENT_SOCKET_MODE=${isRoot ? '600' : '666'}`,
      // Fewer threads leave more of a small pids limit to the commands.
      'UV_THREADPOOL_SIZE=2',
    ],
    Labels: { ...spec.labels },
    HostConfig: {
      Binds: [
        `${spec.agentProgramPath}:${GUEST_AGENT_PROGRAM}:ro`,
        `${runDir}:${GUEST_RUN_DIR}:rw`,
      ],
      ReadonlyRootfs: true,
      Tmpfs: {
        '/tmp': `rw,nosuid,nodev,size=${spec.tmpSizeMb}m,mode=1777`,
        [GUEST_OUTPUTS_DIR]: `rw,nosuid,nodev,size=${spec.outputsSizeMb}m,uid=${GUEST_UID},gid=${GUEST_UID},mode=0755`,
      },
      CapDrop: ['ALL'],
      SecurityOpt: ['no-new-privileges'],
      NetworkMode: 'none',
      PidsLimit: spec.maxProcesses,
      Memory: memoryBytes,
      MemorySwap: memoryBytes,
      NanoCpus: Math.round(spec.cpus * 1e9),
      Init: true,
      Privileged: false,
    },
  })
  const remove = async (): Promise<void> => {
    await container.remove({ force: true, v: true }).catch((error: { statusCode?: number }) => {
      if (error?.statusCode !== 404) throw error
    })
    await rm(spec.hostDir, { recursive: true, force: true })
  }
  try {
    await container.start()
  } catch (error) {
    await remove().catch(() => {})
    throw error
  }
  return { containerId: container.id, agentSocketPath: join(runDir, 'agent.sock'), remove }
}
