import {
  closeSync,
  constants,
  fstatSync,
  lstatSync,
  openSync,
  readFileSync,
  type Stats,
} from 'node:fs'
import { connect, type Socket } from 'node:net'
import type { Duplex } from 'node:stream'
import { RESTORED_MARKER } from '@cordon/agent/protocol'
import { RetryableDialError } from '@cordon/agent/sandbox'
import type { ContainerBackendConfig } from '@cordon/builtin-backends'
import type Docker from 'dockerode'
import { HostUploadStage, STAGE_ROOM_BYTES } from './upload-stage.js'

/**
 * The direct channel: a unix socket the agent listens on inside the
 * container, which the host reaches through the container's root as the
 * kernel shows it to the host (`/proc/<pid>/root`), past the engine.
 *
 * Every byte a file operation moves otherwise crosses the engine's attach
 * stream, whose throughput on this kind of machine (about 160 MiB/s up and
 * 115 MiB/s down) is below what `docker cp` gets through the archive
 * endpoint; and every message of a command passes through the engine and
 * its shim, each a process to wake and a copy to make (an exec round trip
 * measured 7.3 ms median on the attach against 4.6 ms on the socket). A
 * unix socket has neither cost.
 *
 * What keeps it the host's alone: the socket lives in a tmpfs of its own,
 * root's and mode 0700, which the sandbox's user (no capabilities, no
 * CAP_DAC_OVERRIDE) cannot enter; the socket itself is root's, mode 0600;
 * and every connection authenticates with the sandbox's secret as any other
 * does. The sandbox has still no network interface and nothing new to reach.
 *
 * Under gVisor the host cannot see this socket; the host-backed socket
 * ({@link HOST_SOCKET_DIR}) takes its place where it can.
 *
 * When it works: the engine runs on this machine (its socket is a local
 * unix socket), the runtime is runc (gVisor keeps the socket inside its own
 * kernel), and the host may enter another process's root (root, or
 * CAP_SYS_PTRACE). Anywhere else the socket is not found or never answers
 * (see DirectRoute) and every stream stays on the attach, which is always
 * correct, only slower.
 */

/** Where the agent's direct socket lives inside the container. */
export const DIRECT_SOCKET_DIR = '/run/cordon-agent'
export const DIRECT_SOCKET_PATH = `${DIRECT_SOCKET_DIR}/files.sock`

/**
 * Under gVisor, where the host cannot see the direct socket, the agent also
 * listens on a socket in a directory the host does see: a volume of the
 * engine's (a tmpfs on the host, root's, mode 0700, removed with the
 * container) mounted here. gVisor serves a mount from the host through its
 * gofer, and a socket bound on it is a host socket when runsc runs with
 * `--host-uds=create`. That flag holds for every mount of the sandbox, so
 * cordon asks for it only where the agent's directory is the one writable
 * mount the host backs: a sandbox with a writable `hostDir` or volume runs
 * under plain `runsc`, as before, because a socket its user bound there
 * would be a host socket that gVisor then hides from the agent's seal (see
 * the agent's output-seal.ts), left for host tools to find. The set-up
 * script registers runsc with the flag under {@link HOST_SOCKETS_RUNTIME}
 * beside `runsc` (tooling/engine/daemon.runsc.json); on an engine without
 * it, streams take the attach, as before. `create` lets gVisor bind host
 * sockets, not connect to them: a sandbox still reaches nothing on the host
 * through a mount.
 */
export const HOST_SOCKETS_RUNTIME = 'runsc-host-sockets'

export const HOST_SOCKET_DIR = '/run/cordon-agent-host'
export const HOST_SOCKET_PATH = `${HOST_SOCKET_DIR}/files.sock`

/** Whether a container of this config gets the socket's tmpfs and the agent its listener. */
export function wantsDirectSocket(
  config: Pick<ContainerBackendConfig, 'runtime'>,
  engineSocketPath: string | undefined,
): boolean {
  return (
    config.runtime !== 'runsc' && engineSocketPath !== undefined && process.platform === 'linux'
  )
}

/**
 * Whether the host can dial a gVisor sandbox's host-backed socket at all: an
 * engine on this machine, and a host that runs as root (the volume's
 * directory on the host is root's, mode 0700).
 */
export function hostCanDialHostSockets(engineSocketPath: string | undefined): boolean {
  return engineSocketPath !== undefined && process.platform === 'linux' && process.getuid?.() === 0
}

/**
 * Whether a sandbox gets the host-backed socket (and runs under
 * {@link HOST_SOCKETS_RUNTIME}): gVisor, a host that can dial it, an engine
 * that has the runtime, and no writable host-backed mount in its layout.
 */
export function wantsHostSocket(options: {
  readonly config: Pick<ContainerBackendConfig, 'runtime'>
  readonly engineSocketPath: string | undefined
  readonly engineRuntimes: readonly string[]
  readonly writableHostMounts: boolean
}): boolean {
  return (
    options.config.runtime === 'runsc' &&
    !options.writableHostMounts &&
    options.engineRuntimes.includes(HOST_SOCKETS_RUNTIME) &&
    hostCanDialHostSockets(options.engineSocketPath)
  )
}

/** What a socket's directory needs for the socket and the restore's marker. */
const SOCKET_ROOM_BYTES = 65536

/**
 * The host-backed socket's directory: an anonymous volume of the engine's
 * local driver, a tmpfs root's with mode 0700 (as the direct socket's), so
 * the engine removes it with its container; labelled as cordon's, so that
 * `cordon gc` finds one an engine left behind. Beside the socket it is the
 * stage of uploads' pieces (upload-stage.ts): {@link STAGE_ROOM_BYTES} of
 * the host's memory at most, taken only while pieces wait.
 */
export function hostSocketMount(labels: Record<string, string>): Docker.MountSettings {
  return {
    Type: 'volume',
    // No name: an anonymous volume, which the engine removes with the container.
    Source: '',
    Target: HOST_SOCKET_DIR,
    VolumeOptions: {
      NoCopy: true,
      Labels: labels,
      DriverConfig: {
        Name: 'local',
        Options: {
          type: 'tmpfs',
          device: 'tmpfs',
          o: `size=${SOCKET_ROOM_BYTES + STAGE_ROOM_BYTES},mode=0700,nosuid,nodev,noexec`,
        },
      },
    },
  }
}

/** The tmpfs that holds the socket: root's, mode 0700, tiny, nothing executable. */
export function directSocketTmpfs(): Record<string, string> {
  return { [DIRECT_SOCKET_DIR]: `rw,nosuid,nodev,noexec,size=${SOCKET_ROOM_BYTES},mode=0700` }
}

/** Not followed at the last component: a link there is refused (ELOOP), not resolved. */
const O_NOFOLLOW = constants.O_NOFOLLOW

/** How often the host dials the direct socket while the agent starts. */
const LISTENER_POLL_MS = 1

/**
 * Where a sandbox's command and file streams go: over the direct socket
 * wherever it works, over the attach otherwise.
 *
 * The socket is found while the agent boots (an inspect, off the path of the
 * create), and the host dials it until the agent listens: the agent's first
 * answer then comes over the socket, not through the engine, whose attach
 * costs about a millisecond each way. Readiness is also checked on the attach
 * at the same time, which is always correct; whichever answers first counts.
 *
 * There is no probe of its own: the first stream through the socket is the
 * probe. If the socket never worked, a failed dial gives it up for good and
 * the stream (and every later one) goes on the attach; once a dial has
 * worked, a later failure is the agent's and is reported as such, not hidden
 * by a switch of channel.
 */
export class DirectRoute {
  private socket: DirectSocket | undefined
  private readonly found: Promise<void>
  private enabled = false
  private proved = false
  private closed = false

  constructor(finding: Promise<DirectSocket | undefined>) {
    this.found = finding.then((socket) => {
      if (this.closed) socket?.close()
      else this.socket = socket
    })
  }

  /**
   * The first connection to the agent's socket, dialled every
   * {@link LISTENER_POLL_MS} while its file is missing or refuses (the agent
   * is starting). Undefined when the socket cannot be used or `signal` ends
   * the wait first.
   */
  async firstConnection(signal: AbortSignal): Promise<Duplex | undefined> {
    await this.found
    while (this.socket && !this.closed && !signal.aborted) {
      try {
        const stream = await this.socket.connect(signal)
        this.proved = true
        this.enabled = true
        return stream
      } catch (error) {
        const code = ((error as Error).cause as NodeJS.ErrnoException | undefined)?.code
        if (code !== 'ENOENT' && code !== 'ECONNREFUSED') return undefined
      }
      await new Promise((resolve) => setTimeout(resolve, LISTENER_POLL_MS))
    }
    return undefined
  }

  /**
   * Where uploads may stage pieces (upload-stage.ts): the host-backed
   * socket's directory once it is found, whichever way the stream goes.
   */
  uploadStage(): HostUploadStage | undefined {
    return this.closed ? undefined : this.socket?.stage
  }

  /**
   * The agent answered (its direct listener is opened before it serves the
   * attach, so it is up too): later streams try the socket.
   */
  enable(): void {
    this.enabled = true
  }

  async dial(signal: AbortSignal, attach: () => Duplex): Promise<Duplex> {
    const socket = this.enabled && !this.closed ? this.socket : undefined
    if (!socket) return attach()
    try {
      const stream = await socket.connect(signal)
      this.proved = true
      return stream
    } catch (error) {
      if (this.proved) throw error
      this.close()
      return attach()
    }
  }

  close(): void {
    this.closed = true
    this.socket?.close()
    this.socket = undefined
  }
}

/**
 * Whether every directory from the container's root to the socket's is a
 * real directory, and the last one is root's with mode 0700 (the tmpfs
 * cordon mounted there).
 *
 * The host resolves the socket's path itself, from the container's root as
 * its own kernel sees it. A symbolic link on that way would be followed by
 * the host's kernel with the host's root: an image whose `/run` is a link to
 * `/anywhere` (or to `../../..`, which climbs out of the container's root
 * from here) would point the host's dial at a host path of the image's
 * choosing. No link is accepted; an image shaped so keeps every stream on
 * the attach. The check is made once: nothing in a running sandbox can
 * change these directories (the root filesystem is read-only, the last
 * directory is a mount point owned by root, and nobody in the container may
 * mount).
 */
export function isSocketDirectory(containerRoot: string): boolean {
  let path = containerRoot
  let stats: Stats | undefined
  for (const part of DIRECT_SOCKET_DIR.split('/').filter(Boolean)) {
    path = `${path}/${part}`
    stats = lstatSync(path, { throwIfNoEntry: false })
    if (!stats?.isDirectory()) return false
  }
  return stats !== undefined && stats.uid === 0 && (stats.mode & 0o7777) === 0o700
}

export class DirectSocket {
  private constructor(
    /**
     * A descriptor on the directory the socket's path starts from (the
     * container's root, or the host-backed socket's directory): it pins
     * that filesystem even if the pid or the path is reused.
     */
    private readonly rootFd: number,
    /** The socket's path from there. */
    private readonly socketPath: string = DIRECT_SOCKET_PATH,
    /** For the host-backed socket: its directory as the stage of uploads' pieces. */
    readonly stage?: HostUploadStage,
  ) {}

  /**
   * The host-backed socket of a gVisor sandbox ({@link HOST_SOCKET_DIR}):
   * its directory on the host is the source the engine reports for that
   * mount, which must be one of the engine's volumes and a real directory,
   * root's, mode 0700. Undefined otherwise: streams then stay on the attach.
   * That the socket exists there (gVisor may not create host sockets) is
   * proved by the first dial, as for the other.
   */
  static async findOnHost(docker: Docker, containerId: string): Promise<DirectSocket | undefined> {
    let dirFd: number | undefined
    try {
      const mounts = (await docker.getContainer(containerId).inspect()).Mounts ?? []
      const mount = mounts.find(
        (entry) => entry.Destination === HOST_SOCKET_DIR && entry.Type === 'volume',
      )
      if (!mount?.Source) return undefined
      dirFd = openSync(mount.Source, constants.O_RDONLY | constants.O_DIRECTORY | O_NOFOLLOW)
      const stats = fstatSync(dirFd)
      if (!stats.isDirectory() || stats.uid !== 0 || (stats.mode & 0o7777) !== 0o700) {
        closeSync(dirFd)
        return undefined
      }
      return new DirectSocket(
        dirFd,
        `/${HOST_SOCKET_PATH.split('/').pop()}`,
        HostUploadStage.of(dirFd),
      )
    } catch {
      if (dirFd !== undefined) closeSync(dirFd)
      return undefined
    }
  }

  /**
   * Finds the container's root through its init's pid and checks that the
   * process is that container's (its cgroup names the container), and that
   * the way to the socket is the root-only directory cordon mounted
   * ({@link isSocketDirectory}). Undefined when any step fails: streams then
   * stay on the attach.
   */
  static async find(docker: Docker, containerId: string): Promise<DirectSocket | undefined> {
    let rootFd: number | undefined
    try {
      const pid = (await docker.getContainer(containerId).inspect()).State?.Pid
      if (!pid) return undefined
      // On an engine in another machine or VM (Docker Desktop) the pid means
      // nothing here; a process of this machine with that pid is not the container.
      if (!readFileSync(`/proc/${pid}/cgroup`, 'utf8').includes(containerId)) return undefined
      rootFd = openSync(`/proc/${pid}/root`, 'r')
      if (!isSocketDirectory(`/proc/self/fd/${rootFd}`)) {
        closeSync(rootFd)
        return undefined
      }
      return new DirectSocket(rootFd)
    } catch {
      if (rootFd !== undefined) closeSync(rootFd)
      return undefined
    }
  }

  /**
   * Puts the restore's marker beside the host-backed socket (its directory
   * is the one this holds): the agent, restored and waiting, then listens
   * there again. Created new, never through a link.
   */
  markRestored(): void {
    closeSync(
      openSync(
        `/proc/self/fd/${this.rootFd}/${RESTORED_MARKER}`,
        constants.O_WRONLY | constants.O_CREAT | constants.O_EXCL | O_NOFOLLOW,
        0o600,
      ),
    )
  }

  private get path(): string {
    return `/proc/self/fd/${this.rootFd}${this.socketPath}`
  }

  /** One connection to the agent's direct listener. */
  connect(signal: AbortSignal): Promise<Duplex> {
    return new Promise((resolve, reject) => {
      const socket: Socket = connect({ path: this.path })
      const abort = () => {
        socket.destroy()
        reject(new RetryableDialError('the direct socket did not answer in time'))
      }
      if (signal.aborted) return abort()
      signal.addEventListener('abort', abort, { once: true })
      socket.once('connect', () => {
        signal.removeEventListener('abort', abort)
        resolve(socket)
      })
      socket.once('error', (error) => {
        signal.removeEventListener('abort', abort)
        reject(
          new RetryableDialError(`the direct socket refused: ${error.message}`, { cause: error }),
        )
      })
    })
  }

  close(): void {
    this.stage?.close()
    try {
      closeSync(this.rootFd)
    } catch {
      // Closed already.
    }
  }
}
