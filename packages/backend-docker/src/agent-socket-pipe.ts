import type { Duplex, Readable } from 'node:stream'
import {
  formatResumeLine,
  type MuxStream,
  RESUMED_ACK,
  type StreamOpening,
} from '@cordon/agent/protocol'
import { StdioChannel } from '@cordon/agent/sandbox'
import { SandboxOperationError } from '@cordon/core'
import type Docker from 'dockerode'
import {
  type DemuxedEngineStream,
  engineStreamCarrier,
  startAttachedRootExec,
} from './attached-channel.js'
import { DIRECT_SOCKET_PATH } from './direct-socket.js'
import { askUntilEnded } from './engine-lag.js'

/**
 * The way back to an agent waiting for its resume line (a memory snapshot's
 * `suspend-channel`) in a container gVisor restored, or one whose checkpoint
 * failed. gVisor does not wake a restored stdin pipe, so the session the
 * attach carried moves to a connection to the agent's direct socket: the
 * engine's exec starts a pipe between its own stdio and that socket (as root:
 * the socket is root's, mode 0600, in a root-only directory), the host
 * writes the resume line (the new secret and lifetime) and, once the agent
 * has answered, speaks the session over it exactly as over the attach: every
 * command and file stream, and the sandbox's egress connections. The exec's
 * end ends the session, and the agent with it, as the attach's end would.
 *
 * The pipe is cordon-launcher's `--pipe` where the runtime holds the
 * launcher (a static C program: it starts in a fraction of Node's time, and
 * this is on the path of every restore), else the agent's own `--pipe`.
 */
export interface SocketPipeSession {
  readonly channel: StdioChannel
  /**
   * Ends the session and resolves once the pipe's process is gone (or after
   * `timeoutMs`): a checkpoint must not catch it holding a pipe of an exec
   * the restored sandbox will not have.
   */
  closeAndWait(timeoutMs?: number): Promise<void>
}

export async function resumeOverSocketPipe(options: {
  readonly docker: Docker
  readonly containerId: string
  /** The container's entry: cordon-launcher's `--agent` form, or the agent's program. */
  readonly entrypoint: readonly string[]
  readonly secret: string
  /** ms from now, `null` for none, undefined to keep the running one. */
  readonly lifetimeMs: number | null | undefined
  readonly signal: AbortSignal
  /** Streams the agent opens (egress connections). */
  readonly onStream?: (stream: MuxStream, opening: StreamOpening) => void
}): Promise<SocketPipeSession> {
  const { docker, containerId } = options
  const { exec, socket, demuxed } = await startSocketPipe(docker, containerId, options.entrypoint)
  let log = ''
  const keepLog = (chunk: Buffer): void => {
    log = (log + chunk.toString('utf8')).slice(-1_000)
  }
  demuxed.stderr.on('data', keepLog)
  try {
    socket.write(formatResumeLine(options.secret, options.lifetimeMs))
    await waitForResumed(demuxed.stdout, options.signal, () => log)
  } catch (error) {
    socket.destroy()
    throw error
  } finally {
    demuxed.stderr.off('data', keepLog)
  }
  const channel = new StdioChannel(engineStreamCarrier(socket, demuxed, options.onStream))
  return {
    channel,
    async closeAndWait(timeoutMs = 5_000) {
      channel.close()
      // The pipe's program ends once its stdin does; the engine says so late (engine-lag.ts).
      await askUntilEnded(
        () =>
          exec.inspect().then(
            (info) => info.Running,
            () => false,
          ),
        (running) => running === true,
        { forMs: timeoutMs, everyMs: 25 },
      )
    },
  }
}

/**
 * Starts `<pipe program> --pipe <socket>` in the container with the
 * engine's exec, as root: its stdio is then a connection to the agent's
 * direct socket (how a host reaches it where the socket is not the host's
 * to dial: under gVisor, on a remote engine).
 */
export function startSocketPipe(
  docker: Docker,
  containerId: string,
  entrypoint: readonly string[],
): Promise<{ exec: Docker.Exec; socket: Duplex; demuxed: DemuxedEngineStream }> {
  return startAttachedRootExec(docker, containerId, socketPipeCommand(entrypoint))
}

/** `<pipe program> --pipe <socket>`, from the container's entry. */
export function socketPipeCommand(entrypoint: readonly string[]): string[] {
  const launcher = entrypoint[1] === '--agent' ? entrypoint[0] : undefined
  const program = launcher !== undefined ? [launcher] : [...entrypoint]
  return [...program, '--pipe', DIRECT_SOCKET_PATH]
}

/**
 * Reads the agent's answer to the resume line, and leaves what follows it
 * (the session's first frames, if the agent has already opened a stream)
 * unread for the session.
 */
export function waitForResumed(
  stream: Readable,
  signal: AbortSignal,
  log: () => string,
): Promise<void> {
  const ack = Buffer.from(RESUMED_ACK, 'utf8')
  return new Promise((resolve, reject) => {
    let seen = Buffer.alloc(0)
    const done = (error?: Error): void => {
      stream.off('data', onData)
      stream.off('end', onEnd)
      signal.removeEventListener('abort', onAbort)
      stream.pause()
      if (error) reject(error)
      else resolve()
    }
    const onData = (chunk: Buffer): void => {
      seen = Buffer.concat([seen, chunk])
      const at = seen.indexOf(ack)
      if (at === -1) return
      const rest = seen.subarray(at + ack.length)
      done()
      if (rest.length > 0) stream.unshift(rest)
    }
    const onEnd = (): void =>
      done(
        new SandboxOperationError(
          'resume',
          `the restored agent's socket closed before it took the resume line${log() ? `: ${log().trim()}` : ''}`,
        ),
      )
    const onAbort = (): void =>
      done(
        new SandboxOperationError(
          'resume',
          'the restored agent did not take its resume line in time',
          {
            cause: signal.reason,
          },
        ),
      )
    if (signal.aborted) return onAbort()
    stream.on('data', onData)
    stream.once('end', onEnd)
    signal.addEventListener('abort', onAbort, { once: true })
  })
}
