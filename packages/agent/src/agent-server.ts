// Synchronous on purpose: two calls at listen time, and node:fs/promises costs milliseconds of start-up to load.
import { chmodSync, existsSync, rmSync, unlinkSync } from 'node:fs'
import { connect, createServer, type Server, Socket } from 'node:net'
import { dirname, join } from 'node:path'
import type { Duplex, Readable, Writable } from 'node:stream'
import {
  type AgentConfig,
  type AgentListenAddress,
  loadSecret,
  type ResumeLine,
  readResumeLine,
  readSecretLine,
} from './agent-config.js'
import { ALL_OPERATIONS, type ConnectionContext, serveConnection } from './agent-connection.js'
import { DeadlineClock } from './deadline-clock.js'
import { HostHold } from './host-hold.js'
import { KeptProcessRegistry } from './kept-process.js'
import { withLargeReads } from './large-reads.js'
import { NativeLauncher } from './launcher-client.js'
import { NonceSource, runReseedHook } from './nonce-source.js'
import { sealOutputs } from './output-seal.js'
import { PathJail } from './path-jail.js'
import { PendingHandshakes } from './pending-handshakes.js'
import { nodeLauncher } from './process-launcher.js'
import { killAgentCommands } from './process-tree.js'
import { RESTORED_MARKER, RESUMED_ACK } from './protocol/resume-line.js'
import { type MuxStream, pipeBothWays, StreamMux } from './protocol/stream-mux.js'
import { listenOnPath } from './unix-listener.js'
import { actAsItself, actAsUser } from './user-identity.js'
import { killProcessesOf } from './user-processes-kill.js'

/** How often a suspended agent looks for the restore's marker (RESTORED_MARKER). */
const RESTORE_WATCH_MS = 5

/** Connections served at once; beyond this new ones are closed at once. */
const MAX_CONNECTIONS = 512
/** Unproved connections one listener holds at once (pending-handshakes.ts); well under {@link MAX_CONNECTIONS}. */
const MAX_PENDING_HANDSHAKES = 64

export interface RunningAgent {
  /** Where the agent listens: a socket path, `fd:N`, or `host:port`. */
  readonly address: string
  /** The agent's deadlines; the host holds them while it has the sandbox frozen. */
  readonly clock: DeadlineClock
  /**
   * What a resume signal triggers: runs the re-seed hook, re-reads the secret
   * file if a new one was delivered, drops every open connection (after a
   * snapshot resume they are dead anyway) and listens again.
   */
  resume(): Promise<void>
  close(): Promise<void>
  /**
   * Told when a suspended stdio channel has been resumed (`suspend-channel`,
   * then a resume line on stdin): in the container suspended or in one
   * restored from its checkpoint.
   */
  onChannelResumed?: ((line: ResumeLine) => void) | undefined
}

/** Starts serving. Resolves once the agent is listening. */
export async function startAgent(config: AgentConfig): Promise<RunningAgent> {
  // A secret on stdin comes through the engine's attach, and reading it means
  // waiting for a turn of the event loop: the launcher and the direct listener
  // start meanwhile, and a connection made before it has come waits for it at
  // the proof (nothing is served before a proof checks out).
  let secret: Promise<string> =
    config.secret.kind === 'stdin'
      ? readSecretLine(process.stdin)
      : Promise.resolve(loadSecret(config.secret, config.log)).then((loaded) => {
          if (loaded === undefined)
            throw new Error('the secret file does not exist; the agent never runs unauthenticated')
          return loaded
        })
  // Failures surface where the secret is awaited below; this keeps an early one from being unhandled.
  secret.catch(() => {})
  let resumes = 0
  const clock = new DeadlineClock()
  const nonces = new NonceSource()
  // A launcher that started the agent is used even where none is named to start:
  // its pipes must be taken, or Node's spawn would pass them on to commands.
  const native =
    config.launcher || config.parentLauncher
      ? new NativeLauncher(
          config.launcher,
          (level, message) => config.log(level, message),
          config.parentLauncher,
        )
      : undefined
  // Started now, off the path of the first command; a failure shows at the first command.
  native?.start().catch(() => {})
  const context: ConnectionContext = {
    config,
    launcher: native ?? nodeLauncher,
    processes: new KeptProcessRegistry(),
    operations: ALL_OPERATIONS,
    jail: new PathJail(
      config.writeRoots,
      config.readRoots,
      config.runAs ? actAsUser(config.runAs) : actAsItself,
    ),
    nonces,
    startedAt: performance.now(),
    clock,
    secret: () => secret,
    resumes: () => resumes,
  }
  if (config.listen.kind === 'stdio')
    return startStdioAgent(config, context, native, secret, (next) => {
      secret = next
      secret.catch(() => {})
      resumes++
    })
  await secret
  const sockets = new Set<Socket>()
  let closing: Promise<void> | undefined
  // No stdio channel ties this agent to its host: a host that is not
  // detached holds on with a `hold-host` connection, and this agent ends
  // once none has been open for the host's grace (host-hold.ts).
  if (!config.detached)
    context.hostHold = new HostHold(clock, (graceMs) => {
      config.log('info', 'no host has held on for the grace; stopping', { graceMs })
      // process.exitCode: the status a deliberate end (a storage cap) set, 0 otherwise.
      void running.close().finally(() => process.exit())
    })
  let server = await listen(config.listen, context, sockets)
  config.log('info', 'agent listening', { address: describeAddress(config, server) })

  const running: RunningAgent = {
    get address() {
      return describeAddress(config, server)
    },
    clock,
    async resume() {
      if (config.reseedHook) {
        try {
          nonces.reseed(await runReseedHook(config.reseedHook))
        } catch (error) {
          config.log(
            'error',
            're-seed hook failed; nonces still mix the platform generator and the clock',
            {
              error: (error as Error).message,
            },
          )
        }
      }
      nonces.reseed(Buffer.from(`${process.pid}:${Date.now()}:${resumes}`))
      const fresh =
        config.secret.kind === 'stdin' ? undefined : loadSecret(config.secret, config.log)
      if (fresh !== undefined) secret = Promise.resolve(fresh)
      resumes++
      for (const socket of sockets) socket.destroy()
      // An inherited listening descriptor belongs to the supervisor and survives a resume as it is.
      if (config.listen.kind !== 'fd') {
        await closeServer(server)
        server = await listen(config.listen, context, sockets)
      }
      config.log('info', 'agent resumed and listening again', { resumes })
    },
    close() {
      closing ??= (async () => {
        context.hostHold?.stop()
        for (const socket of sockets) socket.destroy()
        context.processes.endAll()
        killAgentCommands(config.runAs)
        await closeServer(server)
        sealOnEnd(config)
        native?.close()
      })()
      return closing
    },
  }
  return running
}

/**
 * The agent's last act, whatever ends it: with host-visible outputs to seal,
 * every process of the sandbox's user is killed and the outputs are made
 * safe for host tools (output-seal.ts).
 */
function sealOnEnd(config: AgentConfig): void {
  if (!config.runAs || config.sealRoots.length === 0) return
  const kill = killProcessesOf(config.runAs, config.launcher)
  const report = sealOutputs(config.sealRoots, { uid: config.runAs.uid })
  config.log('info', 'outputs sealed', { ...kill, ...report })
}

/**
 * Serves a stream multiplexer on stdin and stdout: the channel of an agent
 * that is a container's entry process, reached through the engine's attach.
 * `agent` and `file` streams carry the protocol (file operations act as the
 * sandbox's user through the jail's identity switch). The sandbox's
 * egress port, if any, turns each local connection into an `egress` stream
 * toward the host. The host closing the channel ends the agent.
 */
async function startStdioAgent(
  config: AgentConfig,
  context: ConnectionContext,
  native: NativeLauncher | undefined,
  secret: Promise<string>,
  replaceSecret: (next: Promise<string>) => void,
): Promise<RunningAgent> {
  // Listening before the attach is served: the host takes an answer on the
  // attach to mean this socket is up too. And before the secret has come in
  // on stdin: the host's first connection is then made while it does.
  const directSockets = new Set<Socket>()
  // The host-backed socket's connections, apart: a memory snapshot ends them (below).
  const hostSockets = new Set<Socket>()
  const listenOnHost = async (): Promise<Server | undefined> =>
    config.hostSocket
      ? listen(
          { kind: 'unix', path: config.hostSocket, mode: 0o600, hostBacked: true },
          context,
          hostSockets,
        ).catch((error: unknown) => {
          // Not fatal: the host finds no socket there and uses the other ways.
          config.log('warn', 'no host-backed socket', { error: (error as Error).message })
          return undefined
        })
      : undefined
  const [direct, listeningOnHost] = await Promise.all([
    config.directSocket
      ? listen(
          { kind: 'unix', path: config.directSocket, mode: 0o600 },
          context,
          directSockets,
        ).catch((error: unknown) => {
          // Not fatal: the host finds no socket and keeps every stream on stdio.
          config.log('warn', 'no direct socket; every stream stays on stdio', {
            error: (error as Error).message,
          })
          return undefined
        })
      : undefined,
    listenOnHost(),
  ])
  let hostListener = listeningOnHost
  const restoredMarker =
    config.hostSocket === undefined ? undefined : join(dirname(config.hostSocket), RESTORED_MARKER)
  /**
   * While suspended: looks for the restore's marker every
   * RESTORE_WATCH_MS (a stat of a file the host serves, cheap next to the
   * restore itself) and, once it is there, removes it and listens on the
   * host-backed socket again. Returns what stops the watch.
   */
  const watchForRestore = (): (() => void) => {
    if (!restoredMarker) return () => {}
    // One from before the checkpoint would make the agent listen while it is saved.
    rmSync(restoredMarker, { force: true })
    let listening = false
    const timer = setInterval(() => {
      if (listening || !existsSync(restoredMarker)) return
      listening = true
      clearInterval(timer)
      rmSync(restoredMarker, { force: true })
      void listenOnHost().then((server) => {
        if (server && closing) server.close()
        else if (server) hostListener = server
      })
    }, RESTORE_WATCH_MS)
    return () => clearInterval(timer)
  }
  const closeHostListener = (): Server | undefined => {
    const server = hostListener
    hostListener = undefined
    server?.close()
    for (const socket of hostSockets) socket.destroy()
    return server
  }
  try {
    // The mux reads stdin from the byte after the secret's line.
    await secret
  } catch (error) {
    for (const socket of directSockets) socket.destroy()
    const host = closeHostListener()
    if (direct) await closeServer(direct)
    if (host) await closeServer(host)
    throw error
  }
  // fd 1 as a socket: writes to a pipe through process.stdout would block the event loop.
  const output = new Socket({ fd: 1, readable: false, writable: true })
  const newSession = (input: Readable = process.stdin, into: Writable = output): StreamMux =>
    new StreamMux(input, into, {
      initiator: false,
      maxStreams: MAX_CONNECTIONS,
      onStream: (stream, opening) => {
        stream.on('error', () => {})
        if (opening.kind === 'agent' || opening.kind === 'file') {
          void serveConnection(stream, context)
        } else if (opening.kind === 'connect') {
          connectToSandboxPort(stream, opening.port)
        } else {
          stream.destroy()
        }
      },
    })
  let mux = newSession()
  let suspended = false
  // The sandbox's proxy port: each connection becomes an `egress` stream to the host.
  const egressConnections = new Set<Socket>()
  const listenForEgress = async (port: number): Promise<Server> => {
    // Half-open on: a client that shuts its write side still gets the answer.
    const server = createServer({ allowHalfOpen: true }, (socket) => {
      socket.on('error', () => {})
      if (mux.isClosed || suspended) {
        socket.destroy()
        return
      }
      egressConnections.add(socket)
      socket.once('close', () => egressConnections.delete(socket))
      pipeBothWays(socket, mux.open({ kind: 'egress' }))
    })
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject)
      server.listen(port, '127.0.0.1', () => resolve())
    })
    return server
  }
  let egress =
    config.egressPort === undefined ? undefined : await listenForEgress(config.egressPort)
  let closing: Promise<void> | undefined
  let running: RunningAgent | undefined
  const watchSession = (): void => {
    mux.onClose((reason) => {
      if (config.detached && !closing) {
        // A detached sandbox outlives its creator: hosts reach it again on the direct socket.
        config.log(
          'info',
          'the host closed the channel; serving the direct socket until the lifetime ends',
          {
            reason: reason.message,
          },
        )
        return
      }
      config.log('info', 'the host closed the channel; stopping', { reason: reason.message })
      // process.exitCode: the status a deliberate end (a storage cap) set, 0 otherwise.
      void close().finally(() => process.exit())
    })
  }
  // A memory snapshot: the session ends here, and what the checkpoint keeps
  // waits for a resume line with a new secret (in this container, or in a new
  // one restored from the checkpoint) before it serves anything again. The
  // line comes on stdin, or as the first bytes of a connection to the direct
  // socket (root's: only the host, through the engine's exec, reaches it).
  // The second route is the one that works in a container restored by
  // gVisor, whose stdin pipe is not woken again after a restore: that
  // connection then carries the new session, as stdin and stdout did, and
  // its end ends the agent as the end of stdin would.
  let sessionConnection: Duplex | undefined
  // A detached agent whose host has gone serves its session again on a
  // connection to the direct socket that asks for it (`adopt-session`,
  // after proving the secret): a host that connects to the sandbox gets
  // its egress connections that way. One connection holds it at a time; a
  // second is refused while the first lasts, so no host takes the
  // sandbox's egress from another unseen. Its end leaves the agent as the
  // creator's going did: serving the direct socket, its proxy port refusing
  // every connection.
  let adopting = false
  context.sessionAdoption = {
    claim() {
      if (!config.detached)
        return 'this agent is not detached: its one session is on stdin and stdout, and ends with it'
      if (closing) return 'the agent is ending'
      if (suspended) return "the agent's session is suspended for a memory snapshot"
      if (adopting || (!mux.isClosed && sessionConnection))
        return "another host holds this sandbox's session (and its egress) on the direct socket; one host holds it at a time"
      if (!mux.isClosed) return "the sandbox's creator still holds its session on stdin and stdout"
      adopting = true
      return undefined
    },
    abandon() {
      adopting = false
    },
    adopt(stream) {
      adopting = false
      sessionConnection = stream
      mux = newSession(stream, stream)
      mux.onClose(() => {
        if (sessionConnection === stream) sessionConnection = undefined
        stream.destroy()
      })
      watchSession()
      config.log('info', 'a host adopted the session on the direct socket')
    },
  }
  context.suspendChannel = () => {
    if (suspended || closing) return
    suspended = true
    let resumeWith!: (secret: string) => void
    let refuse!: (error: Error) => void
    // Connections on the direct socket wait here: the old secret opens nothing more.
    replaceSecret(
      new Promise<string>((resolve, reject) => {
        resumeWith = resolve
        refuse = reject
      }),
    )
    mux.release()
    // A session a connection carried goes with it (flushed: the suspend's answer is its last frame).
    sessionConnection?.end()
    sessionConnection = undefined
    // This gVisor cannot checkpoint a TCP socket something waits on ("endpoint
    // still has waiters upon save"), which a listening server always is: the
    // proxy port closes while the agent is suspended, and listens again once
    // it is resumed. Its connections rode the session just released.
    const proxyPort = egress ? config.egressPort : undefined
    if (egress) {
      egress.close()
      egress = undefined
      for (const socket of egressConnections) socket.destroy()
    }
    // Nor a unix socket bound on the host ("Cannot save endpoint with bound
    // host socket"), nor its connections: the host-backed listener closes
    // too, and listens again once resumed. The resume line comes on stdin or
    // on the direct socket, which stays (gVisor keeps it in its own memory).
    const listenedOnHost = closeHostListener() !== undefined
    // Restored from the checkpoint, it is told so by a file the host puts
    // beside the socket, and listens there again for its resume line.
    const stopWatchingForRestore = listenedOnHost ? watchForRestore() : () => {}
    config.log('info', 'channel suspended; waiting for a resume line')
    const stopReadingStdin = new AbortController()
    let resumed = false
    const resume = (line: ResumeLine, connection: Socket | undefined): void => {
      if (resumed) return
      resumed = true
      context.takeConnection = undefined
      stopReadingStdin.abort()
      stopWatchingForRestore()
      // The proxy port and the host-backed socket listen before the session
      // starts: nothing the host does once resumed finds them closed.
      void Promise.all([
        (proxyPort === undefined ? Promise.resolve() : listenForEgress(proxyPort)).then(
          (server) => {
            if (server && closing) server.close()
            else if (server) egress = server
          },
          (error: Error) =>
            config.log('error', 'the proxy port could not listen again after a resume', {
              error: error.message,
            }),
        ),
        // (Already listening if the restore's marker brought the resume line there.)
        (listenedOnHost && !hostListener ? listenOnHost() : Promise.resolve(undefined)).then(
          (server) => {
            if (server && closing) server.close()
            else if (server) hostListener = server
          },
        ),
      ]).then(() => {
        context.nonces.reseed(Buffer.from(`${process.pid}:${Date.now()}:resume`))
        resumeWith(line.secret)
        if (connection) {
          // The host opens the session's streams only once it has read this line.
          connection.write(RESUMED_ACK)
          sessionConnection = connection
          mux = newSession(connection, connection)
        } else {
          mux = newSession()
        }
        watchSession()
        suspended = false
        config.log('info', 'channel resumed with a new secret', {
          on: connection ? 'direct socket' : 'stdin',
        })
        running?.onChannelResumed?.(line)
      })
    }
    context.takeConnection = (socket) => {
      readResumeLine(socket).then(
        (line) => {
          if (resumed) socket.destroy()
          else resume(line, socket)
        },
        () => socket.destroy(),
      )
      return true
    }
    readResumeLine(process.stdin, stopReadingStdin.signal).then(
      (line) => resume(line, undefined),
      (error: unknown) => {
        if (resumed) return
        refuse(error as Error)
        // The host went away (stdin ended) before resuming: the sandbox ends as with any host.
        config.log('info', 'no resume line; stopping', { reason: (error as Error).message })
        void close().finally(() => process.exit())
      },
    )
  }
  const close = (): Promise<void> =>
    (closing ??= (async () => {
      context.processes.endAll()
      killAgentCommands(config.runAs)
      mux.close()
      // The host's idle spare connections would otherwise hold the close open.
      for (const socket of directSockets) socket.destroy()
      const host = closeHostListener()
      if (direct) await closeServer(direct)
      if (host) await closeServer(host)
      // Before the egress server's connections drain: the user's processes hold them.
      sealOnEnd(config)
      native?.close()
      if (egress) await closeServer(egress)
    })())
  watchSession()
  const egressAddress = egress?.address()
  config.log('info', 'agent serving on stdio', {
    ...(egressAddress && typeof egressAddress === 'object'
      ? { egressPort: egressAddress.port }
      : {}),
    ...(config.runAs ? { runAs: `${config.runAs.uid}:${config.runAs.gid}` } : {}),
  })
  running = {
    address: 'stdio',
    clock: context.clock,
    async resume() {
      // A stdio agent resumes through `suspend-channel` and a resume line, not a signal.
    },
    close,
  }
  return running
}

async function listen(
  address: AgentListenAddress & { readonly hostBacked?: boolean },
  context: ConnectionContext,
  sockets: Set<Socket>,
): Promise<Server> {
  const handshakes = new PendingHandshakes(MAX_PENDING_HANDSHAKES)
  // The host-backed socket's connections read in large pieces (large-reads.ts):
  // taken paused, and made to read so before they read anything.
  const server = createServer({ pauseOnConnect: address.hostBacked === true }, (accepted) => {
    const socket = address.hostBacked ? withLargeReads(accepted, server) : accepted
    if (sockets.size >= MAX_CONNECTIONS) {
      socket.destroy()
      return
    }
    sockets.add(socket)
    socket.on('close', () => sockets.delete(socket))
    socket.on('error', () => {})
    if (context.takeConnection?.(socket)) return
    const proved = handshakes.admit(socket)
    socket.on('close', proved)
    void serveConnection(socket, context, proved)
  })
  if (address.kind === 'stdio') throw new Error('stdio is served by startStdioAgent')
  if (address.kind === 'unix') {
    try {
      unlinkSync(address.path)
    } catch {
      // Nothing left there by an earlier listener.
    }
  }
  if (address.kind === 'unix') {
    await listenOnPath(server, address.path)
    try {
      chmodSync(address.path, address.mode)
    } catch (error) {
      // gVisor refuses to change a host socket's mode: its directory, root's
      // and 0700, is what keeps it the host's (the backend checks that). A
      // listener that is not kept is not left listening either.
      if (!address.hostBacked || (error as NodeJS.ErrnoException).code !== 'EPERM') {
        server.close()
        throw error
      }
    }
    return server
  }
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject)
    const done = (): void => {
      server.off('error', reject)
      resolve()
    }
    if (address.kind === 'fd') server.listen({ fd: address.fd }, done)
    else server.listen(address.port, address.host, done)
  })
  return server
}

function closeServer(server: Server): Promise<void> {
  return new Promise((resolve) => server.close(() => resolve()))
}

function describeAddress(config: AgentConfig, server: Server): string {
  const { listen } = config
  if (listen.kind === 'stdio') return 'stdio'
  if (listen.kind === 'unix') return listen.path
  if (listen.kind === 'fd') return `fd:${listen.fd}`
  const bound = server.address()
  return typeof bound === 'object' && bound
    ? `${listen.host}:${bound.port}`
    : `${listen.host}:${listen.port}`
}

/**
 * A host-opened `connect` stream: joined to a TCP connection to `port` on
 * the sandbox's loopback (a dev server, a preview). Only the host opens
 * these; the sandbox's side is an ordinary local client connection.
 */
function connectToSandboxPort(stream: MuxStream, port: unknown): void {
  if (typeof port !== 'number' || !Number.isInteger(port) || port < 1 || port > 65535) {
    stream.destroy()
    return
  }
  const socket = connect({ port, host: '127.0.0.1', allowHalfOpen: true })
  socket.on('error', () => stream.destroy())
  pipeBothWays(socket, stream)
}
