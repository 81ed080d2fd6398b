import { createHash } from 'node:crypto'
import { mkdir, rm, writeFile } from 'node:fs/promises'
import { join } from 'node:path'
import type Dockerode from 'dockerode'

/** Where the guest sees its run directory (agent socket, secret file). */
export const GUEST_RUN_DIR = '/run/cordon'
export const GUEST_AGENT_PROGRAM = '/opt/cordon/cordon-agent.mjs'
export const GUEST_OUTPUTS_DIR = '/mnt/user-data/outputs'
// Far above any account a host or an image defines (the Docker backend's range).
const GUEST_UID_BASE = 2 ** 30
const GUEST_UID_SPAN = 2 ** 30 - 2

/**
 * The unprivileged uid (and gid) a guest's commands run as: one per sandbox,
 * so no two guests, and no host account, share it. The agent runs as root
 * and switches to it for every command and file operation
 * (`CORDON_AGENT_RUN_AS`), so sandbox code can neither trace nor signal the
 * agent, nor read its memory or environment.
 */
export function guestSandboxUid(sandboxId: string): number {
  const digest = createHash('sha256').update(sandboxId).digest()
  return GUEST_UID_BASE + (digest.readUInt32BE(0) % GUEST_UID_SPAN)
}

/**
 * What the agent may do as root: start commands as the sandbox's uid
 * (SETUID, SETGID), signal them (KILL), and act on files whatever modes the
 * sandbox set, and on a run directory the host owns (DAC_OVERRIDE).
 * Commands get none of these: another uid clears them.
 */
const GUEST_AGENT_CAPABILITIES = ['SETUID', 'SETGID', 'KILL', 'DAC_OVERRIDE']

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
  /**
   * Called once when the guest's agent (its entry process) exits by itself:
   * the guest has ended (openapi.yaml, **Agent exit**). Not called for an
   * exit {@link Guest.remove} caused.
   */
  readonly onExit?: (() => void) | undefined
}

export interface Guest {
  readonly containerId: string
  /** The uid and gid the guest's commands run as ({@link guestSandboxUid}). */
  readonly sandboxUid: number
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
  /** Runs a command as the guest's root (the agent's identity), with its capabilities; rejects unless it exits 0. */
  runAsAgent(command: readonly string[]): Promise<void>
  remove(): Promise<void>
}

const isRoot = typeof process.getuid === 'function' && process.getuid() === 0

/**
 * Starts one guest: the real cordon agent in a container hardened the way a
 * cordon sandbox must be (commands under a per-sandbox uid, the agent
 * as root with only the capabilities it needs, no-new-privileges, read-only root filesystem, tmpfs scratch and outputs, no
 * network at all, pids and memory limits with no extra swap, an init process).
 * Memory and process limits are the guest's, so the conformance suite's
 * memory bomb and fork bomb hit real kernel limits.
 *
 * The secret reaches the agent as a file in the run directory, which the agent
 * deletes after reading; it is never in the container's environment or config.
 */
export async function startGuest(docker: Dockerode, spec: GuestSpec): Promise<Guest> {
  const uid = guestSandboxUid(spec.sandboxId)
  const runDir = join(spec.hostDir, 'run')
  // The host's (root's, when the host is root) and mode 0700: the agent, root
  // with DAC_OVERRIDE, makes its socket here and removes the secret; the
  // sandbox's uid can neither list, enter nor write it.
  await mkdir(runDir, { recursive: true, mode: 0o700 })
  const secretFile = join(runDir, 'secret')
  await writeFile(secretFile, spec.agentSecret, { mode: 0o400 })

  const memoryBytes = spec.memoryLimitMb * 1024 * 1024
  const container = await docker.createContainer({
    name: `cordon-standin-${spec.sandboxId}`,
    Image: spec.image,
    User: '0:0',
    Cmd: ['node', GUEST_AGENT_PROGRAM],
    WorkingDir: '/',
    Env: [
      `CORDON_AGENT_LISTEN=unix:${GUEST_RUN_DIR}/agent.sock`,
      `CORDON_AGENT_SECRET_FILE=${GUEST_RUN_DIR}/secret`,
      `CORDON_AGENT_WRITE_ROOTS=${GUEST_OUTPUTS_DIR}`,
      `CORDON_AGENT_RUN_AS=${uid}:${uid}`,
      // Root on the host reaches any socket; a host user needs it open (the
      // run directory still keeps the sandbox out, and the secret guards it).
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
        [GUEST_OUTPUTS_DIR]: `rw,nosuid,nodev,exec,size=${spec.outputsSizeMb}m,uid=${uid},gid=${uid},mode=0755`,
      },
      CapDrop: ['ALL'],
      CapAdd: GUEST_AGENT_CAPABILITIES,
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
  let removing = false
  const remove = async (): Promise<void> => {
    removing = true
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
  // The agent is the container's entry process (under its init): its exit stops the container.
  container.wait().then(
    () => {
      if (!removing) spec.onExit?.()
    },
    () => {},
  )
  return {
    containerId: container.id,
    sandboxUid: uid,
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
    run: (command, stdout) => runInGuest(docker, container, `${uid}:${uid}`, command, stdout),
    runAsAgent: (command) => runInGuest(docker, container, '0:0', command, undefined),
    remove,
  }
}

async function runInGuest(
  docker: Dockerode,
  container: Dockerode.Container,
  user: string,
  command: readonly string[],
  stdout: NodeJS.WritableStream | undefined,
): Promise<void> {
  const exec = await container.exec({
    Cmd: [...command],
    User: user,
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
