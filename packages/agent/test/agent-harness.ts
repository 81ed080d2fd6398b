import { type ChildProcess, spawn } from 'node:child_process'
import { randomBytes } from 'node:crypto'
import { once } from 'node:events'
import { existsSync } from 'node:fs'
import { mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises'
import { connect, type Socket } from 'node:net'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { fileURLToPath } from 'node:url'
import {
  authenticateToAgent,
  type ExitMessage,
  FramedConnection,
  requestExec,
  type UploadStage,
} from '../src/protocol/index.js'
import { AgentClient } from '../src/sandbox/index.js'

/** The bundled program, exactly what guests run. Built by `pnpm build`. */
export const AGENT_PROGRAM = fileURLToPath(new URL('../dist/cordon-agent.mjs', import.meta.url))
/** The same program as CommonJS, and the loader that starts it from a code cache or a snapshot. */
export const AGENT_CJS_PROGRAM = fileURLToPath(new URL('../dist/cordon-agent.cjs', import.meta.url))
export const AGENT_LOADER = fileURLToPath(
  new URL('../dist/cordon-agent-loader.cjs', import.meta.url),
)

/** cordon-launcher for this machine, built by `pnpm build` (scripts/build-launcher.mjs). */
export const LAUNCHER_PROGRAM = fileURLToPath(
  new URL(`../dist/launcher/linux-${process.arch}/cordon-launcher`, import.meta.url),
)

/** How an agent under test starts commands: its environment, and whether a launcher starts it. */
export interface LaunchMode {
  readonly env: Record<string, string>
  readonly startedByLauncher?: boolean
}

/**
 * The ways the agent starts commands; tests of command behaviour run under
 * each: Node's spawn, a launcher the agent starts, and the launcher that
 * started the agent (`cordon-launcher --agent`, a Docker sandbox's entry).
 */
export const LAUNCHERS: ReadonlyArray<readonly [string, LaunchMode]> = [
  ["Node's spawn", { env: {} }],
  ['cordon-launcher', { env: { CORDON_AGENT_LAUNCHER: LAUNCHER_PROGRAM } }],
  [
    'cordon-launcher (parent)',
    { env: { CORDON_AGENT_LAUNCHER: LAUNCHER_PROGRAM }, startedByLauncher: true },
  ],
]

export interface AgentUnderTest {
  readonly dir: string
  readonly outputs: string
  readonly socketPath: string
  readonly child: ChildProcess
  secret: string
  readonly stderr: () => string
  /** A connected, not yet authenticated, framed connection. */
  connectRaw(): Promise<FramedConnection>
  /** An authenticated connection. */
  connect(options?: { heartbeatMs?: number; secret?: string }): Promise<FramedConnection>
  stop(): Promise<void>
}

/**
 * Runs the real bundled agent as a child process listening on a unix socket in
 * a fresh temporary directory, with `<dir>/out` as its write root.
 */
export async function startAgentProcess(
  options: {
    env?: Record<string, string>
    secretVia?: 'env' | 'file'
    listen?: string
    stdio3?: number
    secret?: string
    /**
     * Start the agent with only the capabilities it has in a Docker sandbox
     * (SETUID, SETGID, KILL), through util-linux's setpriv; needs root.
     */
    sandboxCapabilities?: boolean
    /** The bundle to run (default: the ES module build). */
    program?: string
    /**
     * Started by `cordon-launcher --agent`, as a Docker sandbox's entry is:
     * `child` is then the launcher, and the agent its child.
     */
    startedByLauncher?: boolean
    /** A program (and its arguments) that starts the rest of the command, e.g. to change what it inherits. */
    prefix?: readonly string[]
  } = {},
): Promise<AgentUnderTest> {
  if (!existsSync(AGENT_PROGRAM))
    throw new Error(`${AGENT_PROGRAM} is missing: run pnpm build in packages/agent first`)
  if (options.env?.CORDON_AGENT_LAUNCHER === LAUNCHER_PROGRAM && !existsSync(LAUNCHER_PROGRAM))
    throw new Error(`${LAUNCHER_PROGRAM} is missing: run pnpm build in packages/agent first`)
  const dir = await mkdtemp(join(tmpdir(), 'cordon-agent-test-'))
  const outputs = join(dir, 'out')
  await mkdir(outputs)
  const socketPath = join(dir, 'agent.sock')
  const secret = options.secret ?? `secret-${Math.random().toString(36).slice(2)}-${Date.now()}`
  const env: Record<string, string> = {
    PATH: process.env.PATH ?? '/usr/bin:/bin',
    CORDON_AGENT_LISTEN: options.listen ?? `unix:${socketPath}`,
    CORDON_AGENT_WRITE_ROOTS: outputs,
    CORDON_AGENT_READ_ROOTS: join(dir, 'readonly'),
    ...options.env,
  }
  if ((options.secretVia ?? 'file') === 'file') {
    await writeFile(join(dir, 'secret'), secret, { mode: 0o600 })
    env.CORDON_AGENT_SECRET_FILE = join(dir, 'secret')
  } else env.CORDON_AGENT_SECRET = secret
  const stdio: Array<'ignore' | 'pipe' | number> = ['ignore', 'pipe', 'pipe']
  if (options.stdio3 !== undefined) stdio.push(options.stdio3)
  const agentCommand = [
    ...(options.startedByLauncher ? [LAUNCHER_PROGRAM, '--agent'] : []),
    process.execPath,
    options.program ?? AGENT_PROGRAM,
  ]
  const command = [
    ...(options.prefix ?? []),
    ...(options.sandboxCapabilities
      ? [
          'setpriv',
          // What backend-docker's agentCapabilities() grants, without a writable host directory.
          '--bounding-set=-all,+setuid,+setgid,+kill,+dac_override,+sys_ptrace',
          '--inh-caps=-all',
        ]
      : []),
    ...agentCommand,
  ]
  const child = spawn(command[0]!, command.slice(1), { env, stdio })
  let stderr = ''
  child.stderr!.on('data', (chunk: Buffer) => {
    stderr += chunk.toString()
  })
  child.stdout!.resume()
  await new Promise<void>((resolve, reject) => {
    const poll = setInterval(() => {
      if (stderr.includes('"agent listening"')) {
        clearInterval(poll)
        resolve()
      }
    }, 10)
    child.once('exit', (code) => {
      clearInterval(poll)
      reject(new Error(`agent exited with ${code}: ${stderr}`))
    })
  })
  const agent: AgentUnderTest = {
    dir,
    outputs,
    socketPath,
    child,
    secret,
    stderr: () => stderr,
    async connectRaw() {
      const socket: Socket = await new Promise((resolve, reject) => {
        const s = connect(socketPath)
        s.once('connect', () => resolve(s))
        s.once('error', reject)
      })
      return new FramedConnection(socket)
    },
    async connect(connectOptions = {}) {
      const connection = await agent.connectRaw()
      await authenticateToAgent(connection, connectOptions.secret ?? agent.secret, {
        heartbeatMs: connectOptions.heartbeatMs ?? 1_000,
      })
      return connection
    },
    async stop() {
      if (child.exitCode === null && child.signalCode === null) {
        const exited = new Promise((resolve) => child.once('exit', resolve))
        child.kill('SIGTERM')
        await exited
      }
      await rm(dir, { recursive: true, force: true })
    },
  }
  return agent
}

/** The port of an agent started with `listen: 'tcp:127.0.0.1:0'`, as its log says. */
export function tcpPortOf(agent: AgentUnderTest): number {
  const port = Number(/"address":"127\.0\.0\.1:(\d+)"/.exec(agent.stderr())?.[1])
  if (!Number.isInteger(port) || port <= 0) throw new Error(`no TCP port in: ${agent.stderr()}`)
  return port
}

export function delay(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms))
}

/** Pids of live processes whose command line contains `needle`. */
export async function processesMatching(needle: string): Promise<number[]> {
  const { readdir, readFile } = await import('node:fs/promises')
  const found: number[] = []
  for (const entry of await readdir('/proc')) {
    if (!/^\d+$/.test(entry)) continue
    try {
      const stat = await readFile(`/proc/${entry}/stat`, 'latin1')
      if (stat.slice(stat.lastIndexOf(')') + 2).startsWith('Z')) continue
      const cmdline = (await readFile(`/proc/${entry}/cmdline`, 'utf8')).replaceAll('\0', ' ')
      if (cmdline.includes(needle)) found.push(Number(entry))
    } catch {
      // Gone while we looked.
    }
  }
  return found
}

/**
 * Pids of the processes matching `needle` once `settled` holds for them, or
 * after `timeoutMs` whatever they are. A command's children exec what they
 * run some time after the agent answered `started` (and a killed tree takes
 * a moment to go): on a loaded machine a single look too soon sees a
 * process that still carries its parent's command line, or none at all.
 */
export async function processesOnce(
  needle: string,
  settled: (pids: readonly number[]) => boolean,
  timeoutMs = 10_000,
): Promise<number[]> {
  const deadline = Date.now() + timeoutMs
  for (;;) {
    const found = await processesMatching(needle)
    if (settled(found) || Date.now() > deadline) return found
    await delay(50)
  }
}

/**
 * Runs one command on the agent and collects its output. With `stdin`, the
 * bytes are written and the input closed; a command that closes its input
 * early is not an error (its exit says what happened).
 */
export async function runCommand(
  agent: AgentUnderTest,
  command: string,
  args: string[],
  options: {
    env?: Record<string, string>
    stdin?: string | Buffer
    timeoutMs?: number
    cwd?: string
  } = {},
): Promise<{ exit: ExitMessage; stdout: string; stderr: string }> {
  const connection = await agent.connect()
  let stdout = ''
  let stderr = ''
  const session = await requestExec(
    connection,
    {
      command,
      args,
      env: options.env ?? {},
      stdin: options.stdin !== undefined,
      ...(options.timeoutMs ? { timeoutMs: options.timeoutMs } : {}),
      ...(options.cwd ? { cwd: options.cwd } : {}),
    },
    {
      onStdout: (bytes) => (stdout += Buffer.from(bytes).toString()),
      onStderr: (bytes) => (stderr += Buffer.from(bytes).toString()),
    },
  )
  if (options.stdin !== undefined) {
    await session.writeStdin(Buffer.from(options.stdin)).catch(() => {})
    await session.endStdin().catch(() => {})
  }
  try {
    return { exit: await session.result, stdout, stderr }
  } finally {
    connection.destroy()
  }
}

/**
 * The agent as a gVisor sandbox runs it: serving stdio, its secret on stdin,
 * and listening on a host-backed socket at `hostSocket` too (or, without
 * one, on a plain unix socket there: `hostBacked: false`). Resolves once the
 * socket exists, with a client that dials it; the caller ends the process.
 */
export async function startSocketAgent(options: {
  readonly socket: string
  readonly writeRoots: string
  readonly hostBacked?: boolean
}): Promise<{ child: ChildProcess; client: (stage?: UploadStage) => AgentClient }> {
  const secret = randomBytes(32).toString('base64url')
  const hostBacked = options.hostBacked ?? true
  const child = spawn(process.execPath, [AGENT_PROGRAM], {
    env: {
      PATH: process.env.PATH ?? '/usr/bin:/bin',
      CORDON_AGENT_WRITE_ROOTS: options.writeRoots,
      ...(hostBacked
        ? {
            CORDON_AGENT_LISTEN: 'stdio',
            CORDON_AGENT_SECRET_STDIN: '1',
            CORDON_AGENT_HOST_SOCKET: options.socket,
          }
        : { CORDON_AGENT_LISTEN: `unix:${options.socket}`, CORDON_AGENT_SECRET: secret }),
    },
    stdio: ['pipe', 'pipe', 'pipe'],
  })
  if (hostBacked) child.stdin!.write(`${secret}\n`)
  for (let waited = 0; !existsSync(options.socket); waited += 20) {
    if (waited > 10_000) throw new Error('the agent never listened on its socket')
    await delay(20)
  }
  return {
    child,
    client: (stage) =>
      new AgentClient({
        secret,
        description: `unix:${options.socket}`,
        dial: async () => {
          const socket = connect(options.socket)
          await once(socket, 'connect')
          return socket
        },
        maxConnectAttempts: 50,
        ...(stage ? { uploadStage: () => stage } : {}),
      }),
  }
}
