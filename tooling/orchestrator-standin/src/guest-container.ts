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
  /** Host path of the guest's run directory (seen inside as {@link GUEST_RUN_DIR}). */
  readonly runDir: string
  /** Freezes every process of the guest: the engine's freezer (runc's cgroup freezer). */
  pause(): Promise<void>
  /** Thaws what {@link pause} froze. */
  resume(): Promise<void>
  /**
   * Runs a command in the guest as its unprivileged user (so it can do no
   * more than the guest's own code could); rejects unless it exits 0. Its
   * standard output goes to `stdout` when given.
   */
  run(command: readonly string[], stdout?: NodeJS.WritableStream): Promise<void>
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
        // `exec`: the engine makes a tmpfs noexec unless told, and a guest's own disk is not.
        [GUEST_OUTPUTS_DIR]: `rw,nosuid,nodev,exec,size=${spec.outputsSizeMb}m,uid=${GUEST_UID},gid=${GUEST_UID},mode=0755`,
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
    // A frozen container is thawed first, so its processes can be killed on every runtime.
    await container.unpause().catch(() => {})
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
  return {
    containerId: container.id,
    agentSocketPath: join(runDir, 'agent.sock'),
    runDir,
    pause: async () => {
      await container.pause()
      await untilEngineSaysPaused(container, true)
    },
    resume: async () => {
      await container.unpause()
      await untilEngineSaysPaused(container, false)
    },
    run: (command, stdout) => runInGuest(docker, container, command, stdout),
    remove,
  }
}

async function runInGuest(
  docker: Dockerode,
  container: Dockerode.Container,
  command: readonly string[],
  stdout: NodeJS.WritableStream | undefined,
): Promise<void> {
  const exec = await container.exec({
    Cmd: [...command],
    User: `${GUEST_UID}:${GUEST_UID}`,
    AttachStdout: true,
    AttachStderr: true,
  })
  const stream = await exec.start({})
  const diagnostics: Buffer[] = []
  const keepDiagnostics = {
    write: (chunk: Buffer) => diagnostics.push(chunk),
  } as unknown as NodeJS.WritableStream
  docker.modem.demuxStream(stream, stdout ?? keepDiagnostics, keepDiagnostics)
  await new Promise<void>((resolve, reject) => {
    stream.on('end', resolve)
    stream.on('close', resolve)
    stream.on('error', reject)
  })
  let state = await exec.inspect()
  // The stream can end a moment before the engine records the exit.
  for (let attempt = 0; state.Running && attempt < 100; attempt++) {
    await new Promise((resolve) => setTimeout(resolve, 50))
    state = await exec.inspect()
  }
  if (state.ExitCode !== 0) {
    const said = Buffer.concat(diagnostics).toString('utf8').trim().slice(0, 500)
    throw new Error(`${command.join(' ')} exited ${state.ExitCode} in the guest: ${said}`)
  }
}

/**
 * Docker 20.10 records a pause again when it handles containerd's "paused"
 * event, which can come after an unpause that followed at once (under gVisor
 * most of all); until the "resumed" event is handled, the engine refuses an
 * exec into the running guest as paused. A snapshot right after a resume
 * runs tar by an exec, so pause and resume return once the engine agrees.
 */
async function untilEngineSaysPaused(
  container: Dockerode.Container,
  paused: boolean,
): Promise<void> {
  const deadline = Date.now() + 5_000
  for (;;) {
    const state = (await container.inspect()).State
    if (state.Paused === paused || !state.Running || Date.now() >= deadline) return
    await new Promise((resolve) => setTimeout(resolve, 20))
  }
}
