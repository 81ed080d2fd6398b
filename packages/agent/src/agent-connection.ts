import type { Socket } from 'node:net'
import { dirname } from 'node:path'
import type { Duplex } from 'node:stream'
import type { AgentConfig } from './agent-config.js'
import { type CodeCacheUse, codeCacheUse } from './code-cache-use.js'
import type { DeadlineClock } from './deadline-clock.js'
import { serveWatch } from './directory-watch.js'
import { serveExec } from './exec-runner.js'
import { serveReadFiles } from './file-batch-read.js'
import { serveRemove, serveRename, serveStat } from './file-entry-ops.js'
import { serveListFiles } from './file-list.js'
import { serveReadFile } from './file-read.js'
import { serveWriteFile, serveWriteFiles } from './file-write.js'
import type { HostHold } from './host-hold.js'
import type { KeptProcessRegistry } from './kept-process.js'
import type { NonceSource } from './nonce-source.js'
import { AgentOperationError } from './operation-error.js'
import { type PathJail, PathRefusedError } from './path-jail.js'
import type { ProcessLauncher } from './process-launcher.js'
import { signalExecProcesses } from './process-tree.js'
import { computeAgentProof, verifyAuthProof } from './protocol/auth.js'
import {
  DEFAULT_MAX_FRAME_BYTES,
  FrameError,
  PRE_AUTH_MAX_FRAME_BYTES,
} from './protocol/frame-codec.js'
import { FramedConnection } from './protocol/framed-connection.js'
import {
  type AgentErrorCode,
  type AgentRequest,
  PROTOCOL_REVISION,
  PROTOCOL_VERSION,
  ProtocolError,
  parseClientMessage,
} from './protocol/messages.js'
import { restoreStartupBackgroundWork } from './startup-v8-flags.js'
import { openTcpSockets } from './tcp-sockets.js'
import { measureUsage } from './usage-meter.js'
import { serveMakeDirectory } from './working-directory.js'

export const AGENT_VERSION = '0.1.0'
/**
 * How long a new connection has to authenticate. The host answers a hello in
 * milliseconds, but a host stalled on a loaded machine must not lose its
 * connection for it; a flood is bounded by the slots (pending-handshakes.ts),
 * which drop the oldest, not by this deadline.
 */
const AUTH_TIMEOUT_MS = 10_000
const MIN_HEARTBEAT_MS = 50
const MAX_HEARTBEAT_MS = 60_000

/** The requests a connection may carry. */
export type AgentOperation = AgentRequest['type']

export const ALL_OPERATIONS: ReadonlySet<AgentOperation> = new Set<AgentOperation>([
  'health',
  'usage',
  'signal-marked',
  'exec',
  'read-file',
  'write-file',
  'write-files',
  'read-files',
  'list-files',
  'make-directory',
  'pause-clocks',
  'resume-clocks',
  'suspend-channel',
  'adopt-session',
  'hold-host',
  'stat',
  'remove',
  'rename',
  'watch',
  'list-processes',
  'attach',
])

/**
 * Where the host may stage pieces of an upload (staged-pieces.ts): the
 * host-backed socket's directory, the one place both the host and this agent
 * reach and the sandbox's user does not.
 */
function uploadStage(config: AgentConfig): string | undefined {
  return config.hostSocket === undefined ? undefined : dirname(config.hostSocket)
}

export interface ConnectionContext {
  readonly config: AgentConfig
  /** The requests this agent process serves; any other is refused. */
  readonly operations: ReadonlySet<AgentOperation>
  readonly jail: PathJail
  readonly nonces: NonceSource
  readonly startedAt: number
  /** The agent's deadlines (lifetime, command timeouts), held while the host has the sandbox frozen. */
  readonly clock: DeadlineClock
  /** What starts commands. */
  readonly launcher: ProcessLauncher
  /** The commands started with `keep`. */
  readonly processes: KeptProcessRegistry
  /**
   * The secret in force now (it changes when a resume delivers a new one).
   * A promise: an agent whose secret comes on stdin already listens while it
   * arrives, and a connection made meanwhile waits for it at the proof.
   */
  secret(): Promise<string>
  resumes(): number
  /**
   * Drops the stdio session and waits for a resume line (a memory
   * snapshot, see `SuspendChannelRequest`); set only by an agent serving stdio.
   */
  suspendChannel?: (() => void) | undefined
  /**
   * Serves the agent's session on a connection that asked for it
   * (`adopt-session`); set only by an agent serving stdio.
   */
  sessionAdoption?: SessionAdoption | undefined
  /**
   * What ties a sandbox that is not detached to its host's `hold-host`
   * connections (host-hold.ts); set only by an agent that serves sockets and
   * is not detached.
   */
  hostHold?: HostHold | undefined
  /**
   * Takes a new direct-socket connection before it is served (true: taken),
   * while a suspended agent waits for its resume line there.
   */
  takeConnection?: ((socket: Socket) => boolean) | undefined
}

/** How a stdio agent lets a connection carry its session (see `AdoptSessionRequest`). */
export interface SessionAdoption {
  /**
   * Claims the session for one connection, or says why it cannot be had
   * now. Claimed, no other connection gets it until {@link abandon}, or
   * until the session {@link adopt} starts has ended.
   */
  claim(): string | undefined
  /** Serves the claimed session on `stream` (the answer has been written; nothing else was read from it). */
  adopt(stream: Duplex): void
  /** Gives the claim up (the answer could not be written). */
  abandon(): void
}

/**
 * Serves one connection: challenge, proof, one request, close. Nothing but the
 * `hello` is sent before the client has proved it holds the secret, and until
 * then frames are limited to {@link PRE_AUTH_MAX_FRAME_BYTES}.
 */
export async function serveConnection(
  socket: Duplex,
  context: ConnectionContext,
  /** Called once the client proved the secret (a listener's bound on handshakes, pending-handshakes.ts). */
  onAuthenticated?: () => void,
): Promise<void> {
  const connection = new FramedConnection(socket, { maxFrameBytes: PRE_AUTH_MAX_FRAME_BYTES })
  const { log } = context.config
  try {
    const client = await authenticate(connection, context)
    if (client === undefined) return
    onAuthenticated?.()
    connection.setMaxFrameBytes(DEFAULT_MAX_FRAME_BYTES)
    await connection.send({ type: 'auth-ok', proof: client.agentProof })
    connection.startHeartbeat(client.heartbeatMs, client.heartbeatMs * 4)
    const frame = await connection.read()
    if (!frame) return
    if (frame.kind !== 'message')
      throw new AgentOperationError('bad-request', 'expected a request message')
    const request = parseClientMessage(frame.message)
    if (!context.operations.has(request.type as AgentOperation)) {
      throw new AgentOperationError(
        'bad-request',
        `this connection does not serve "${request.type}" (file operations go on a file stream)`,
      )
    }
    switch (request.type) {
      case 'health':
        await connection.send({
          type: 'health-ok',
          pid: process.pid,
          uptimeMs: Math.round(performance.now() - context.startedAt),
          resumes: context.resumes(),
          agentVersion: AGENT_VERSION,
          writeRoots: context.jail.writeRoots,
          readRoots: context.jail.readRoots,
          commandsUnderOtherUid: commandsUnderOtherUid(context.config.runAs),
          ...(context.config.lifetimeMs === undefined
            ? {}
            : { lifetimeMs: context.config.lifetimeMs }),
          ...codeCacheReport(),
        })
        break
      case 'usage':
        await connection.send(
          await measureUsage(
            context.config.runAs?.uid,
            context.config.writeRoots,
            context.jail.actAs,
          ),
        )
        break
      case 'signal-marked':
        await connection.send({
          type: 'signal-ok',
          signalled: signalExecProcesses(
            { rootPid: undefined, marker: request.marker },
            request.signal,
            context.config.runAs,
          ),
        })
        break
      case 'pause-clocks':
        context.clock.hold()
        await connection.send({ type: 'clocks-ok', heldMs: 0 })
        break
      case 'resume-clocks':
        await connection.send({ type: 'clocks-ok', heldMs: Math.round(context.clock.release()) })
        break
      case 'suspend-channel': {
        const suspend = context.suspendChannel
        if (!suspend)
          throw new AgentOperationError(
            'bad-request',
            'this agent serves no stdio channel to suspend',
          )
        if (request.refuseOpenTcp) {
          const open = openTcpSockets(context.config.egressPort)
          if (open.length > 0)
            throw new AgentOperationError(
              'unsupported',
              `the sandbox holds TCP sockets in use: ${open.join(', ')}`,
            )
        }
        // The answer is the last frame of the session: written before the session is dropped.
        await connection.send({ type: 'channel-suspended' })
        suspend()
        break
      }
      case 'adopt-session': {
        const adoption = context.sessionAdoption
        if (!adoption)
          throw new AgentOperationError(
            'unsupported',
            'this agent serves no session multiplexer to adopt (it does not serve stdio)',
          )
        const refusal = adoption.claim()
        if (refusal) throw new AgentOperationError('unsupported', refusal)
        // No frame of this protocol may follow the answer: the session's bytes do.
        connection.stopHeartbeat()
        try {
          await connection.send({ type: 'session-adopted' })
          connection.release()
        } catch (error) {
          adoption.abandon()
          throw error
        }
        adoption.adopt(connection.socket)
        return
      }
      case 'hold-host': {
        const hostHold = context.hostHold
        if (!hostHold)
          throw new AgentOperationError(
            'unsupported',
            context.config.detached
              ? 'this agent is detached: it outlives its creator, until its lifetime ends'
              : 'this agent serves stdio: its host is held by that channel, which ends it when it closes',
          )
        const held = hostHold.hold(request.graceMs)
        try {
          await connection.send({ type: 'host-held', graceMs: request.graceMs })
          // Heartbeats only from here on (consumed by the connection); the
          // host's silence fails the read, as its close ends it.
          while ((await connection.read()) !== undefined) {}
        } catch {
          // A closed or silent host: the countdown starts below.
        } finally {
          held.release()
        }
        connection.close()
        return
      }
      case 'exec':
        await serveExec(connection, request, {
          defaultCwd: context.config.writeRoots[0] ?? '/',
          protectFromOom: context.config.protectFromOom,
          runAs: context.config.runAs,
          launcher: context.launcher,
          jail: context.jail,
          clock: context.clock,
          processes: context.processes,
        })
        break
      case 'list-processes':
        await connection.send({ type: 'processes', processes: context.processes.list() })
        break
      case 'attach':
        await context.processes.get(request.id).serve(connection, true)
        // The process's end closes the connection; a detach leaves it to the client.
        return
      case 'stat':
        await serveStat(connection, request, context.jail)
        break
      case 'remove':
        await serveRemove(connection, request, context.jail)
        break
      case 'rename':
        await serveRename(connection, request, context.jail)
        break
      case 'watch':
        await serveWatch(connection, request, context.jail)
        break
      case 'read-file':
        await serveReadFile(connection, request, context.jail)
        break
      case 'write-file':
        await serveWriteFile(connection, request, context.jail, uploadStage(context.config))
        break
      case 'write-files':
        await serveWriteFiles(connection, context.jail, uploadStage(context.config))
        break
      case 'read-files':
        await serveReadFiles(connection, request, context.jail)
        break
      case 'list-files':
        await serveListFiles(connection, request, context.jail)
        break
      case 'make-directory':
        await serveMakeDirectory(connection, request, context.jail)
        break
      default:
        throw new AgentOperationError('bad-request', `"${request.type}" is not a request`)
    }
    connection.close()
  } catch (error) {
    const { code, message } = describeFailure(error)
    if (code === 'internal') log('error', 'request failed', { error: message })
    if (!connection.isClosed) {
      await connection.send({ type: 'error', code, message }).catch(() => {})
      connection.close()
    }
  } finally {
    // The first connection served ends the start-up (see startup-v8-flags.ts).
    restoreStartupBackgroundWork()
  }
}

/**
 * Runs the challenge; returns the agreed heartbeat interval and the agent's
 * answer to the client's own challenge, or undefined if the client failed it.
 */
async function authenticate(
  connection: FramedConnection,
  context: ConnectionContext,
): Promise<{ heartbeatMs: number; agentProof: string } | undefined> {
  const nonce = context.nonces.next()
  const secret = context.secret()
  await connection.send({
    type: 'hello',
    protocol: PROTOCOL_VERSION,
    nonce,
    agentVersion: AGENT_VERSION,
    revision: PROTOCOL_REVISION,
  })
  let timer: ReturnType<typeof setTimeout> | undefined
  const deadline = new Promise<undefined>((resolve) => {
    timer = setTimeout(() => resolve(undefined), AUTH_TIMEOUT_MS)
  })
  try {
    const reading = connection.read()
    reading.catch(() => {})
    const frame = await Promise.race([reading, deadline]).catch(() => undefined)
    if (frame?.kind !== 'message') {
      return refuse(connection, 'expected an auth message')
    }
    let auth: ReturnType<typeof parseClientMessage>
    try {
      auth = parseClientMessage(frame.message)
    } catch {
      return refuse(connection, 'malformed auth message')
    }
    const known = await secret
    if (auth.type !== 'auth' || !verifyAuthProof(known, nonce, auth.proof)) {
      context.config.log('warn', 'refused a connection that did not prove the secret')
      return refuse(connection, 'authentication failed')
    }
    const requested = auth.heartbeatMs ?? 5_000
    return {
      heartbeatMs: Math.min(MAX_HEARTBEAT_MS, Math.max(MIN_HEARTBEAT_MS, requested)),
      // Only to a client that proved the secret: an answer is of no use to anyone else.
      agentProof: computeAgentProof(known, auth.nonce, nonce),
    }
  } finally {
    if (timer) clearTimeout(timer)
  }
}

async function refuse(connection: FramedConnection, message: string): Promise<undefined> {
  await connection.send({ type: 'error', code: 'unauthorized', message }).catch(() => {})
  connection.close()
  // Do not wait for a client that will not hang up.
  setTimeout(() => connection.destroy(), 1_000).unref?.()
  return undefined
}

function describeFailure(error: unknown): { code: AgentErrorCode; message: string } {
  if (error instanceof AgentOperationError) return { code: error.code, message: error.message }
  // The host's SandboxPathError names the path; the message says only why.
  if (error instanceof PathRefusedError) return { code: 'path-refused', message: error.reason }
  if (error instanceof ProtocolError || error instanceof FrameError)
    return { code: 'bad-request', message: error.message }
  const errno = error as NodeJS.ErrnoException
  if (typeof errno?.code === 'string') {
    if (errno.code === 'ENOENT') return { code: 'not-found', message: errno.message }
    if (errno.code === 'ENOTEMPTY') return { code: 'not-empty', message: errno.message }
    if (errno.code === 'EXDEV')
      return { code: 'cross-device', message: 'source and target are on different mounts' }
    if (errno.code === 'EBUSY') return { code: 'path-refused', message: errno.message }
    if (errno.code === 'EACCES' || errno.code === 'EPERM' || errno.code === 'EROFS')
      return { code: 'path-refused', message: errno.message }
    return { code: 'io-error', message: errno.message }
  }
  return { code: 'internal', message: error instanceof Error ? error.message : String(error) }
}

/**
 * Whether the sandbox's code runs under a uid other than the agent's: the
 * agent is root and starts commands as `runAs` (never root, agent-config.ts).
 * Only then can that code not trace, signal or impersonate the agent; hosts
 * whose guest they do not build check it (backend-microvm).
 */
function commandsUnderOtherUid(runAs: AgentConfig['runAs']): boolean {
  return runAs !== undefined && process.geteuid?.() === 0
}

function codeCacheReport(): { codeCache?: CodeCacheUse } {
  const use = codeCacheUse()
  return use === undefined ? {} : { codeCache: use }
}
