import { constants } from 'node:os'
import type { Readable } from 'node:stream'
import type { DeadlineClock } from './deadline-clock.js'
import type { KeptProcessRegistry } from './kept-process.js'
import { endedByOomKill, readOomKillCount } from './oom-counter.js'
import type { PathJail } from './path-jail.js'
import type { LaunchedProcess, ProcessLauncher } from './process-launcher.js'
import {
  AGENT_MARKER_VARIABLE,
  agentRunMarker,
  EXEC_MARKER_VARIABLE,
  signalExecProcesses,
} from './process-tree.js'
import type { DataChannel } from './protocol/frame-codec.js'
import type { FramedConnection } from './protocol/framed-connection.js'
import { type ExecRequest, type KillSignalName, parseClientMessage } from './protocol/messages.js'
import { randomBytes } from './random-bytes.js'
import { ensureWorkingDirectory } from './working-directory.js'

export const DEFAULT_PATH = '/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin'
/** After a SIGTERM kill, how long the tree gets before SIGKILL. */
const TERM_GRACE_MS = 2_000

export interface ExecContext {
  readonly defaultCwd: string
  readonly protectFromOom: boolean
  /** Spawn the command as this user (the agent then holds only the rights to do so). */
  readonly runAs: { readonly uid: number; readonly gid: number } | undefined
  /** What starts the command (process-launcher.ts). */
  readonly launcher: ProcessLauncher
  /** Where a missing working directory may be made, and as whom. */
  readonly jail: PathJail
  /** Times the command's timeout in running time: a pause of the sandbox does not count. */
  readonly clock: DeadlineClock
  /** Where a command started with `keep` is registered. */
  readonly processes: KeptProcessRegistry
}

/**
 * Runs one command for one connection: spawns it as an argv (never through a
 * shell) in a process group of its own, streams stdout and stderr as data
 * frames, feeds stdin from data frames with acknowledgements, and ends with
 * an `exit` message.
 *
 * A timeout, a `cancel` or the connection going away kills the command's whole
 * process tree (see process-tree.ts), detached grandchildren included.
 */
export async function serveExec(
  connection: FramedConnection,
  request: ExecRequest,
  context: ExecContext,
): Promise<void> {
  const cwd = request.cwd ?? context.defaultCwd
  // Made first if missing, as `mkdir -p` before the command. Synchronous: a
  // thread-pool round trip here costs an exec about a millisecond.
  ensureWorkingDirectory(context.jail, cwd)

  const marker = randomBytes(12).toString('hex')
  const env: Record<string, string> = {
    PATH: DEFAULT_PATH,
    ...request.env,
    [EXEC_MARKER_VARIABLE]: marker,
    [AGENT_MARKER_VARIABLE]: agentRunMarker(),
  }
  const oomBefore = readOomKillCount()
  const started = performance.now()

  let child: LaunchedProcess
  try {
    child = await context.launcher.launch({
      command: request.command,
      args: request.args,
      cwd,
      env,
      stdin: request.stdin === true,
      runAs: context.runAs,
      raiseOomScore: context.protectFromOom,
    })
  } catch (error) {
    if (typeof (error as NodeJS.ErrnoException).errno !== 'number') throw error
    await reportSpawnFailure(connection, request.command, error as NodeJS.ErrnoException, started)
    return
  }
  const pid = child.pid
  const exec = { rootPid: pid, marker, group: child.execGroup }
  if (request.keep) {
    const kept = context.processes.add({
      child,
      marker,
      command: request.command,
      args: request.args,
      runAs: context.runAs,
      timeoutMs: request.timeoutMs,
      clock: context.clock,
    })
    await connection.send({ type: 'started', pid, id: kept.id })
    await kept.serve(connection, false)
    return
  }
  await connection.send({ type: 'started', pid })

  let timedOut = false
  let aborted = false
  let killTimer: ReturnType<typeof setTimeout> | undefined
  // Finished once its output has closed, not when its first process exits:
  // a background process still holding the output keeps the exec going, and
  // the timeout, an abort and a vanished client still end it.
  let finished = false
  const kill = (signal: KillSignalName): void => {
    signalExecProcesses(exec, signal, context.runAs)
    if (signal === 'SIGTERM' && !killTimer) {
      killTimer = setTimeout(
        () => signalExecProcesses(exec, 'SIGKILL', context.runAs),
        TERM_GRACE_MS,
      )
      killTimer.unref?.()
    }
  }

  const timeout =
    request.timeoutMs === undefined
      ? undefined
      : context.clock.after(request.timeoutMs, () => {
          if (finished) return
          timedOut = true
          kill('SIGKILL')
        })

  const outputs = [
    forward(child.stdout!, 'stdout', connection),
    forward(child.stderr!, 'stderr', connection),
  ]
  const stdinDone = request.stdin
    ? feedStdin(connection, child, kill, (reason) => {
        if (reason === 'abort') aborted = true
      })
    : watchControl(connection, kill, (reason) => {
        if (reason === 'abort') aborted = true
      })
  // The client vanishing means nobody will read the result: end the command.
  connection.onClose(() => {
    if (!finished) kill('SIGKILL')
  })
  void stdinDone.catch(() => {})

  const { code, signal } = await child.closed
  await Promise.allSettled(outputs)
  finished = true
  timeout?.cancel()
  if (killTimer) clearTimeout(killTimer)
  const oomKilled = endedByOomKill(oomBefore, { signal, timedOut, aborted })
  await connection.send({
    type: 'exit',
    exitCode: code ?? (signal ? 128 + (constants.signals[signal] ?? 0) : -1),
    signal,
    timedOut,
    aborted,
    oomKilled,
    durationMs: Math.round(performance.now() - started),
  })
}

/** A command that could not start ends like a shell reports it: 127 not found, 126 not executable. */
async function reportSpawnFailure(
  connection: FramedConnection,
  command: string,
  error: NodeJS.ErrnoException,
  started: number,
): Promise<void> {
  const exitCode = error.code === 'ENOENT' ? 127 : 126
  const reason = error.code === 'ENOENT' ? 'command not found' : (error.message ?? 'cannot execute')
  await connection.send({ type: 'started', pid: 0 })
  await connection.sendData('stderr', Buffer.from(`cordon-agent: ${command}: ${reason}\n`))
  await connection.send({
    type: 'exit',
    exitCode,
    signal: null,
    timedOut: false,
    aborted: false,
    oomKilled: false,
    durationMs: Math.round(performance.now() - started),
  })
}

/** Forwards one output stream, pausing it while the socket is backed up. */
function forward(
  stream: Readable,
  channel: DataChannel,
  connection: FramedConnection,
): Promise<void> {
  return new Promise((resolve) => {
    stream.on('data', (chunk: Buffer) => {
      stream.pause()
      connection.sendData(channel, chunk).then(
        () => stream.resume(),
        // The connection is gone; keep draining so the command is not blocked on a full pipe.
        () => stream.resume(),
      )
    })
    stream.on('end', resolve)
    stream.on('error', () => resolve())
    stream.on('close', () => resolve())
  })
}

/** Handles control messages (cancel) when the command has no stdin. */
async function watchControl(
  connection: FramedConnection,
  kill: (signal: KillSignalName) => void,
  onCancel: (reason: 'abort' | 'kill') => void,
): Promise<void> {
  for (;;) {
    const frame = await connection.read()
    if (!frame) return
    if (frame.kind === 'data') continue
    const message = parseClientMessage(frame.message)
    if (message.type === 'cancel') {
      onCancel(message.reason)
      kill(message.signal)
      await connection.send({ type: 'cancel-ack' })
    }
  }
}

/** Feeds stdin from data frames, acknowledging what the command was handed, and handles cancel. */
async function feedStdin(
  connection: FramedConnection,
  child: LaunchedProcess,
  kill: (signal: KillSignalName) => void,
  onCancel: (reason: 'abort' | 'kill') => void,
): Promise<void> {
  const stdin = child.stdin!
  let written = 0
  let closed = false
  const ack = (): void => {
    void connection.send({ type: 'stdin-ack', bytes: written, closed }).catch(() => {})
  }
  stdin.on('error', () => {
    // EPIPE: the command stopped reading. Later input is dropped and acknowledged as such.
    if (!closed) {
      closed = true
      ack()
    }
  })
  void child.exited.then(() => {
    if (!closed) {
      closed = true
      ack()
    }
  })
  for (;;) {
    const frame = await connection.read()
    if (!frame) return
    if (frame.kind === 'data') {
      if (frame.channel !== 'stdin') continue
      if (closed) {
        ack()
        continue
      }
      const size = frame.data.byteLength
      stdin.write(frame.data, (error) => {
        if (!error) {
          written += size
          ack()
        }
      })
      continue
    }
    const message = parseClientMessage(frame.message)
    if (message.type === 'stdin-end') {
      if (!closed) stdin.end()
    } else if (message.type === 'cancel') {
      onCancel(message.reason)
      kill(message.signal)
      await connection.send({ type: 'cancel-ack' })
    }
  }
}
