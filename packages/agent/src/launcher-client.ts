import { closeSync, constants as fsConstants, openSync } from 'node:fs'
import { Socket } from 'node:net'
import { constants as osConstants } from 'node:os'
import { type Readable, Writable } from 'node:stream'
import { childProcess } from './child-process-module.js'
import { execGroupOf, execGroupsMapped, randomExecGroupOffset } from './exec-group.js'
import {
  type LaunchedProcess,
  type LaunchOutcome,
  type LaunchRequest,
  nodeLauncher,
  type ProcessLauncher,
} from './process-launcher.js'

/**
 * The client of cordon-launcher (launcher/cordon-launcher.c): a small static
 * program that starts every command with vfork(). Either it started the
 * agent (`cordon-launcher --agent`, a container's entry: the agent then uses
 * the pipes it was given) or the agent starts it, once.
 * The protocol is described in that file. The command's pipes are created by
 * the launcher; the agent takes its own copies by opening
 * `/proc/<launcher>/fd/<n>` (a pipe reopened that way is the same pipe), then
 * tells the launcher to close its ends. Both run as the same user (root in a
 * Docker sandbox), which the sandbox's user is not, so only the agent can.
 */

const FLAG_STDIN_PIPE = 1
const FLAG_NEW_SESSION = 2
const FLAG_RAISE_OOM_SCORE = 4
const KEEP_ID = 0xffffffff

interface Pending {
  readonly request: LaunchRequest
  readonly execGroup: number | undefined
  resolve(process: LaunchedProcess): void
  reject(error: Error): void
}

interface Running {
  exit(outcome: LaunchOutcome): void
}

const SIGNAL_NAMES = new Map<number, NodeJS.Signals>(
  Object.entries(osConstants.signals).map(([name, number]) => [number, name as NodeJS.Signals]),
)
const ERRNO_NAMES = new Map<number, string>(
  Object.entries(osConstants.errno).map(([name, number]) => [number, name]),
)

/** The agent's two pipes to a launcher, however it was started. */
interface LauncherLink {
  /** Frames to the launcher. */
  readonly requests: Writable
  /** Lines from it. */
  readonly replies: Readable
  /** Ends the link: kills a launcher the agent started; a parent one exits with the agent. */
  stop(): void
}

export class NativeLauncher implements ProcessLauncher {
  private helper: LauncherLink | undefined
  private helperPid = 0
  private ready: Promise<void> | undefined
  private nextId = 1
  private readonly pending = new Map<number, Pending>()
  private readonly running = new Map<number, Running>()
  private closed = false
  /** The launcher could not be started: every command goes to Node's spawn. */
  private unusable = false
  /** Whether commands that change user are tagged with their exec's group (exec-group.ts); known once started. */
  private tagsExecs = false
  private execGroupOffset = 0

  constructor(
    /** cordon-launcher, to start when no launcher started the agent (or that one is gone); none: Node's spawn then. */
    private readonly path: string | undefined,
    private readonly log: (level: 'warn' | 'error', message: string) => void,
    /** The pipes to the launcher that started the agent, if one did (AgentConfig.parentLauncher). */
    private parent?: { readonly requestFd: number; readonly replyFd: number },
  ) {}

  /** Starts the launcher process now (rather than at the first command). */
  start(): Promise<void> {
    if (this.closed) return Promise.reject(new Error('the launcher is closed'))
    this.ready ??= this.startHelper()
    return this.ready
  }

  async launch(request: LaunchRequest): Promise<LaunchedProcess> {
    if (this.unusable) return nodeLauncher.launch(request)
    const frame = startFrame(request)
    try {
      await this.start()
    } catch (error) {
      // Same behaviour, a few milliseconds slower: better than no commands at all.
      this.unusable = true
      this.log('error', `${(error as Error).message}; commands start with Node's spawn instead`)
      return nodeLauncher.launch(request)
    }
    const id = this.nextId++
    frame.writeUInt32LE(id, 5)
    const execGroup =
      request.runAs && this.tagsExecs ? execGroupOf(id, this.execGroupOffset) : undefined
    frame.writeUInt32LE(execGroup ?? KEEP_ID, 21)
    return new Promise((resolve, reject) => {
      this.pending.set(id, { request, execGroup, resolve, reject })
      this.helper!.requests.write(frame)
    })
  }

  /** Stops the launcher; commands it started keep running. */
  close(): void {
    this.closed = true
    this.helper?.stop()
  }

  private startHelper(): Promise<void> {
    // Read once, here rather than per command: the map of a running process never changes.
    this.tagsExecs = execGroupsMapped()
    if (this.tagsExecs) this.execGroupOffset = randomExecGroupOffset()
    return new Promise((resolve, reject) => {
      let isReady = false
      const gone = (why: string, code: number | null, signal: NodeJS.Signals | null) => {
        if (!isReady) reject(new Error(why))
        this.lost(code, signal)
      }
      // The parent's pipes are taken once; a launcher started later is the agent's own.
      const parent = this.parent
      this.parent = undefined
      if (!parent && this.path === undefined) {
        reject(new Error('no launcher to start (CORDON_AGENT_LAUNCHER is not set)'))
        return
      }
      const link =
        (parent &&
          takeParentLauncher(parent, () =>
            gone('the launcher that started the agent is gone', null, null),
          )) ??
        this.spawnLauncher(
          (error) => {
            if (!isReady)
              reject(new Error(`cannot start the launcher ${this.path}: ${error.message}`))
          },
          (code, signal) =>
            gone(`the launcher ${this.path} exited (${code ?? signal})`, code, signal),
        )
      this.helper = link
      link.requests.on('error', () => {
        // The launcher is gone; that is handled where its end is seen.
      })
      onLines(link.replies, (line) => {
        if (!isReady && line.startsWith('ready ')) {
          isReady = true
          this.helperPid = Number(line.slice(6))
          resolve()
        } else this.answer(line)
      })
    })
  }

  /** Starts a launcher of the agent's own, for an agent no launcher started. */
  private spawnLauncher(
    onError: (error: Error) => void,
    onExit: (code: number | null, signal: NodeJS.Signals | null) => void,
  ): LauncherLink {
    const helper = childProcess().spawn(this.path!, [], { stdio: ['pipe', 'pipe', 'inherit'] })
    helper.once('error', onError)
    helper.once('exit', onExit)
    return { requests: helper.stdin!, replies: helper.stdout!, stop: () => helper.kill('SIGKILL') }
  }

  /** The launcher died: nothing it started can be followed any more. Start a new one next time. */
  private lost(code: number | null, signal: NodeJS.Signals | null): void {
    this.helper = undefined
    this.ready = undefined
    if (!this.closed) this.log('error', `the launcher exited (${code ?? signal})`)
    const error = new Error('the launcher exited before the command started')
    for (const pending of this.pending.values()) pending.reject(error)
    this.pending.clear()
    for (const running of this.running.values()) running.exit({ code: null, signal: null })
    this.running.clear()
  }

  private answer(line: string): void {
    const [kind, ...fields] = line.split(' ')
    const numbers = fields.map(Number)
    const id = numbers[0]!
    if (kind === 'started') {
      const pending = this.pending.get(id)
      if (!pending) return
      this.pending.delete(id)
      const [, pid, outFd, errFd, inFd] = numbers as [number, number, number, number, number]
      try {
        pending.resolve(this.adopt(id, pid, outFd, errFd, inFd, pending))
      } catch (error) {
        // Running, but out of the agent's reach: end it rather than leave it unsupervised.
        this.running.delete(id)
        try {
          process.kill(-pid, 'SIGKILL')
        } catch {
          // Already gone.
        }
        pending.reject(
          new Error(
            `cannot take the command's pipes from the launcher: ${(error as Error).message}`,
          ),
        )
      } finally {
        this.helper?.requests.write(releaseFrame(id))
      }
    } else if (kind === 'failed') {
      const pending = this.pending.get(id)
      if (!pending) return
      this.pending.delete(id)
      pending.reject(spawnError(pending.request.command, numbers[1]!))
    } else if (kind === 'exited') {
      const running = this.running.get(id)
      if (!running) return
      this.running.delete(id)
      const code = numbers[1]!
      running.exit(
        code >= 0
          ? { code, signal: null }
          : { code: null, signal: SIGNAL_NAMES.get(numbers[2]!) ?? 'SIGKILL' },
      )
    } else {
      this.log('error', `unexpected line from the launcher: ${line.slice(0, 200)}`)
    }
  }

  /** Takes the agent's own copies of the command's pipes. */
  private adopt(
    id: number,
    pid: number,
    outFd: number,
    errFd: number,
    inFd: number,
    { request, execGroup }: Pending,
  ): LaunchedProcess {
    const opened: Array<Socket | Writable> = []
    let stdout: Socket
    let stderr: Socket
    let stdin: Writable | undefined
    try {
      stdout = openPipeEnd(this.helperPid, outFd, 'read')
      opened.push(stdout)
      stderr = openPipeEnd(this.helperPid, errFd, 'read')
      opened.push(stderr)
      stdin = request.stdin ? openPipeEnd(this.helperPid, inFd, 'write') : undefined
    } catch (error) {
      for (const stream of opened) stream.destroy()
      throw error
    }
    const exited = new Promise<LaunchOutcome>((resolve) => this.running.set(id, { exit: resolve }))
    const ended = (stream: Readable) =>
      new Promise<void>((resolve) => {
        stream.once('close', () => resolve())
      })
    const closed = Promise.all([exited, ended(stdout), ended(stderr)]).then(([outcome]) => outcome)
    return { pid, execGroup, stdin, stdout, stderr, exited, closed }
  }
}

/**
 * The pipes to the launcher this agent was started by (`cordon-launcher
 * --agent`, how a container's entry starts it, which spares the agent a fork
 * of itself at start-up). The inherited descriptors are replaced by
 * close-on-exec copies, so that no command started by Node's spawn gets
 * them. Undefined if they cannot be taken: the agent then starts a launcher
 * of its own.
 */
function takeParentLauncher(
  fds: { readonly requestFd: number; readonly replyFd: number },
  onGone: () => void,
): LauncherLink | undefined {
  let requests: Writable | undefined
  try {
    requests = openPipeEnd(process.pid, fds.requestFd, 'write')
    const replies = openPipeEnd(process.pid, fds.replyFd, 'read')
    closeSync(fds.requestFd)
    closeSync(fds.replyFd)
    replies.once('close', onGone)
    return { requests, replies, stop: () => requests!.end() }
  } catch {
    requests?.destroy()
    return undefined
  }
}

/** Opens this process's own end of one of the launcher's pipes. */
function openPipeEnd(helperPid: number, fd: number, side: 'read'): Socket
function openPipeEnd(helperPid: number, fd: number, side: 'write'): Writable
function openPipeEnd(helperPid: number, fd: number, side: 'read' | 'write'): Socket | Writable {
  const flags =
    (side === 'read' ? fsConstants.O_RDONLY : fsConstants.O_WRONLY) | fsConstants.O_NONBLOCK
  let own: number
  try {
    own = openSync(`/proc/${helperPid}/fd/${fd}`, flags)
  } catch (error) {
    // Opening a pipe to write with no reader left: the command has already closed its stdin.
    if (side === 'write' && (error as NodeJS.ErrnoException).code === 'ENXIO') return closedInput()
    throw error
  }
  try {
    return new Socket({ fd: own, readable: side === 'read', writable: side === 'write' })
  } catch (error) {
    closeSync(own)
    throw error
  }
}

/** Input to a command that no longer reads any: every write fails as a pipe with no reader does. */
function closedInput(): Writable {
  return new Writable({
    write(_chunk, _encoding, callback) {
      callback(Object.assign(new Error('write EPIPE'), { code: 'EPIPE', errno: -32 }))
    },
  })
}

function spawnError(command: string, errno: number): NodeJS.ErrnoException {
  const code = ERRNO_NAMES.get(errno) ?? `E${errno}`
  return Object.assign(new Error(`spawn ${command} ${code}`), {
    errno: -errno,
    code,
    syscall: `spawn ${command}`,
    path: command,
  })
}

/** The start frame; its id (at offset 5) and group (at 21) are filled in when it is sent. */
function startFrame(request: LaunchRequest): Buffer {
  const strings = [
    request.cwd,
    request.command,
    request.command,
    ...request.args,
    ...Object.entries(request.env).map(([name, value]) => `${name}=${value}`),
  ]
  for (const text of strings) {
    if (text.includes('\0')) {
      throw Object.assign(new TypeError('a command, argument or variable contains a NUL byte'), {
        code: 'ERR_INVALID_ARG_VALUE',
      })
    }
  }
  const body = Buffer.from(`${strings.join('\0')}\0`, 'utf8')
  const header = Buffer.alloc(33)
  header.writeUInt32LE(29 + body.length, 0)
  header.write('S', 4, 'latin1')
  const flags =
    (request.stdin ? FLAG_STDIN_PIPE : 0) |
    FLAG_NEW_SESSION |
    (request.raiseOomScore ? FLAG_RAISE_OOM_SCORE : 0)
  header.writeUInt32LE(flags, 9)
  header.writeUInt32LE(request.runAs?.uid ?? KEEP_ID, 13)
  header.writeUInt32LE(request.runAs?.gid ?? KEEP_ID, 17)
  header.writeUInt32LE(1 + request.args.length, 25)
  header.writeUInt32LE(Object.keys(request.env).length, 29)
  return Buffer.concat([header, body])
}

/** The release frame: the agent holds its own copies of command `id`'s pipes. */
function releaseFrame(id: number): Buffer {
  const frame = Buffer.alloc(9)
  frame.writeUInt32LE(5, 0)
  frame.write('R', 4, 'latin1')
  frame.writeUInt32LE(id, 5)
  return frame
}

/**
 * Calls `onLine` with each line the launcher writes (without its newline).
 * Hand-written rather than node:readline: the launcher's replies are short
 * ASCII lines ending in `\n`, and loading readline (with the modules it pulls
 * in) is part of the start-up every Docker sandbox's create waits for.
 */
function onLines(replies: Readable, onLine: (line: string) => void): void {
  let partial = ''
  replies.setEncoding('latin1')
  replies.on('data', (chunk: string) => {
    let text = partial + chunk
    let newline = text.indexOf('\n')
    while (newline !== -1) {
      onLine(text.slice(0, newline))
      text = text.slice(newline + 1)
      newline = text.indexOf('\n')
    }
    partial = text
  })
}
