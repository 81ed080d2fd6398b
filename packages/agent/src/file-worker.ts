import { type ChildProcess, spawn } from 'node:child_process'
import { readFileSync } from 'node:fs'
import { Socket } from 'node:net'
import type { AgentConfig } from './agent-config.js'
import { FILE_OPERATIONS, serveConnection } from './agent-connection.js'
import { NonceSource } from './nonce-source.js'
import { PathJail } from './path-jail.js'
import { type MuxStream, pipeBothWays, StreamMux } from './protocol/stream-mux.js'

/**
 * File operations as the sandbox's own user.
 *
 * When commands run as another user than the agent (`CORDON_AGENT_RUN_AS`),
 * the agent, which runs as root, must not touch files itself: a path the
 * sandbox controls (a symbolic link in its outputs) would then read what its
 * user cannot. So every file stream is handed, byte for byte, to a worker:
 * the same program, started as the sandbox's user with no capabilities,
 * which authenticates the host and serves the file operations under that
 * user's permissions. The worker learns its settings, the secret among them,
 * on its stdin, never from an environment another process of that user could
 * read; its stdin and stdout then carry a stream multiplexer like the agent's.
 *
 * The worker is started on the first file operation and again after it dies
 * (a command of the same user can kill it; that costs the command only its
 * own file transfers).
 */

/** What the supervisor tells the worker on its first stdin line. */
interface WorkerSettings {
  readonly secret: string
  readonly writeRoots: readonly string[]
  readonly readRoots: readonly string[]
  readonly quiet: boolean
}

export class FileWorker {
  private session: { child: ChildProcess; mux: StreamMux } | undefined

  constructor(
    private readonly config: AgentConfig,
    private readonly secret: () => string,
  ) {}

  /** Connects a host file stream to the worker, starting the worker if needed. */
  relay(host: MuxStream): void {
    let inner: MuxStream
    try {
      inner = this.ensure().mux.open({ kind: 'agent' })
    } catch (error) {
      this.config.log('error', 'the file worker is unavailable', {
        error: (error as Error).message,
      })
      host.destroy()
      return
    }
    pipeBothWays(host, inner)
  }

  close(): void {
    this.session?.child.kill('SIGKILL')
    this.session?.mux.close()
    this.session = undefined
  }

  private ensure(): { child: ChildProcess; mux: StreamMux } {
    if (this.session && !this.session.mux.isClosed) return this.session
    const runAs = this.config.runAs!
    const [command, ...args] = launcherOfThisProgram()
    const child = spawn(command!, [...args, '--file-worker'], {
      uid: runAs.uid,
      gid: runAs.gid,
      cwd: '/',
      // Nothing of the agent's environment; the settings arrive on stdin.
      env: {},
      stdio: ['pipe', 'pipe', 'inherit'],
    })
    const settings: WorkerSettings = {
      secret: this.secret(),
      writeRoots: this.config.writeRoots,
      readRoots: this.config.readRoots,
      quiet: false,
    }
    child.stdin!.write(`${JSON.stringify(settings)}\n`)
    const mux = new StreamMux(child.stdout!, child.stdin!, { initiator: true })
    const session = { child, mux }
    child.on('error', (error) => mux.close(error))
    child.on('exit', () => {
      mux.close(new Error('the file worker exited'))
      if (this.session === session) this.session = undefined
    })
    this.session = session
    return session
  }
}

/**
 * How this program was started, up to its script: `node /path/agent.mjs`, or
 * a dynamic loader in front of node when the runtime came from a volume.
 */
function launcherOfThisProgram(): string[] {
  const cmdline = readFileSync('/proc/self/cmdline', 'utf8').split('\0')
  const script = process.argv[1]
  const end = script === undefined ? -1 : cmdline.indexOf(script)
  if (end === -1) return [process.execPath, ...(script ? [script] : [])]
  return cmdline.slice(0, end + 1)
}

/** The worker's own main: read the settings line, then serve file streams. */
export async function runFileWorker(): Promise<void> {
  const stdin = process.stdin
  const line = await readFirstLine(stdin)
  const settings = JSON.parse(line.text) as WorkerSettings
  const log: AgentConfig['log'] = settings.quiet
    ? () => {}
    : (level, message, fields = {}) =>
        process.stderr.write(
          `${JSON.stringify({ time: new Date().toISOString(), level, worker: 'file', message, ...fields })}\n`,
        )
  const config: AgentConfig = {
    listen: { kind: 'stdio' },
    secret: { kind: 'value', value: settings.secret },
    writeRoots: settings.writeRoots,
    readRoots: settings.readRoots,
    reseedHook: undefined,
    protectFromOom: false,
    runAs: undefined,
    egressPort: undefined,
    lifetimeMs: undefined,
    log,
  }
  const context = {
    config,
    operations: FILE_OPERATIONS,
    jail: new PathJail(settings.writeRoots, settings.readRoots),
    nonces: new NonceSource(),
    startedAt: performance.now(),
    secret: () => settings.secret,
    resumes: () => 0,
  }
  if (line.rest.byteLength > 0) stdin.unshift(line.rest)
  // fd 1 as a socket: writes to a pipe through process.stdout would block the event loop.
  const mux = new StreamMux(stdin, new Socket({ fd: 1, readable: false, writable: true }), {
    initiator: false,
    onStream: (stream) => {
      stream.on('error', () => {})
      void serveConnection(stream, context)
    },
  })
  // The supervisor going away ends the worker.
  mux.onClose(() => process.exit(0))
}

function readFirstLine(stream: NodeJS.ReadableStream): Promise<{ text: string; rest: Buffer }> {
  return new Promise((resolve, reject) => {
    let buffered = Buffer.alloc(0)
    const onData = (chunk: Buffer): void => {
      buffered = Buffer.concat([buffered, chunk])
      const end = buffered.indexOf(10)
      if (end === -1) {
        if (buffered.byteLength > 64 * 1024) reject(new Error('settings line too long'))
        return
      }
      stream.off('data', onData)
      stream.pause()
      resolve({
        text: buffered.subarray(0, end).toString('utf8'),
        rest: buffered.subarray(end + 1),
      })
    }
    stream.on('data', onData)
    stream.once('end', () => reject(new Error('no settings on stdin')))
  })
}
