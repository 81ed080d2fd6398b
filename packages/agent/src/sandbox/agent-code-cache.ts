import { spawn } from 'node:child_process'
import { once } from 'node:events'
import { constants, existsSync } from 'node:fs'
import { access, chmod, copyFile, mkdtemp, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { basename, join } from 'node:path'
import { timeLimit } from '@cordon/core/backend'
import { AGENT_ENV } from '../agent-config.js'
import { CODE_CACHE_OUT_VARIABLE } from '../code-cache-use.js'
import { agentLoaderPath, agentProgramPath } from '../index.js'
import { newAgentSecret } from '../protocol/index.js'
import { AgentClient } from './agent-client.js'
import { dialUnix } from './socket-dial.js'
import { StdioChannel } from './stdio-channel.js'
import { waitForAgent } from './wait-for-agent.js'

/** How long making a cache may take before it is given up (a warm-up takes well under a second). */
const MAKE_TIMEOUT_MS = 30_000

/**
 * Makes the V8 code cache the agent's loader starts the CommonJS program
 * from (see the agent's code-cache-loader.ts for why), at `out`.
 *
 * The cache holds the functions compiled by the time the agent exits, so the
 * agent is run here first, as a container's entry runs it: through its
 * loader (or the loader's startup snapshot, `snapshot`), started by
 * `cordon-launcher --agent` when a launcher is given, serving its stdin
 * and stdout, listening on two unix sockets as well (a temporary directory
 * is its write root). Then it is warmed up as a
 * sandbox's first moments use it: an authenticated health answer on each
 * way in, a command (`true`), a file written, read back, listed and
 * removed. Then its stdin is closed, it ends, and its loader writes the
 * cache. Nothing of the host is shared with it but those files.
 *
 * The cache is valid for the Node binary that ran it (`nodePath`, by default
 * this process's) and for the default V8 flags: use the same binary in the
 * guest, and start it without V8 flags (Node's own options, such as
 * `--v8-pool-size`, do not count). V8 refuses any other cache and the loader
 * then compiles from source. Rejects if the agent fails, no cache is
 * written, or it takes longer than 30 s.
 */
export async function makeAgentCodeCache(options: {
  /** Where the cache goes (`<program>.cache` beside the program in the guest). */
  readonly out: string
  /** The Node binary the guest runs (default: this process's). */
  readonly nodePath?: string
  /** cordon-launcher for this host, if the guest starts the agent through one. */
  readonly launcher?: string | undefined
  /** The CommonJS program and its loader (default: this package's, `agentProgramPath('cjs')` and `agentLoaderPath()`). */
  readonly program?: string
  readonly loader?: string
  /**
   * A startup snapshot of the loader (makeAgentSnapshot) the guest starts
   * the agent from: the agent is then run from it here too, as the guest
   * runs it (`node --snapshot-blob <snapshot> <program>`).
   */
  readonly snapshot?: string
}): Promise<void> {
  // A cache left at `out` from before must not pass for this one.
  await rm(options.out, { force: true })
  const dir = await mkdtemp(join(tmpdir(), 'cordon-code-cache-'))
  const signal = timeLimit(MAKE_TIMEOUT_MS)
  const node = options.nodePath ?? process.execPath
  const program = [
    node,
    ...(options.snapshot
      ? ['--snapshot-blob', options.snapshot]
      : [options.loader ?? agentLoaderPath()]),
    options.program ?? agentProgramPath('cjs'),
  ]
  const launcher = options.launcher
    ? await executable(options.launcher, dir).catch(async (error: unknown) => {
        // Nothing else of this attempt exists yet; its directory goes too.
        await rm(dir, { recursive: true, force: true })
        throw error
      })
    : undefined
  const command = launcher ? [launcher, '--agent', ...program] : program
  const secret = newAgentSecret()
  const directSocket = join(dir, 'direct.sock')
  const hostSocket = join(dir, 'host.sock')
  const child = spawn(command[0]!, command.slice(1), {
    cwd: dir,
    env: {
      PATH: '/usr/bin:/bin',
      [AGENT_ENV.listen]: 'stdio',
      [AGENT_ENV.secretStdin]: '1',
      [AGENT_ENV.writeRoots]: dir,
      [AGENT_ENV.directSocket]: directSocket,
      [AGENT_ENV.hostSocket]: hostSocket,
      ...(launcher ? { [AGENT_ENV.launcher]: launcher } : {}),
      [CODE_CACHE_OUT_VARIABLE]: options.out,
    },
    stdio: ['pipe', 'pipe', 'pipe'],
  })
  const exited = once(child, 'exit') as Promise<[number | null, NodeJS.Signals | null]>
  exited.catch(() => {})
  const killOnTimeout = (): void => {
    child.kill('SIGKILL')
  }
  signal.addEventListener('abort', killOnTimeout, { once: true })
  for (const pipe of [child.stdin, child.stdout, child.stderr]) pipe?.on('error', () => {})
  const channel = new StdioChannel({
    fromAgent: child.stdout!,
    toAgent: child.stdin!,
    agentLog: child.stderr!,
    closeCarrier: () => child.stdin?.end(),
  })
  channel.sendPreface(`${secret}\n`)
  const overStdio = new AgentClient({
    secret,
    description: 'agent making its code cache',
    dial: async (_attempt, kind) => channel.open({ kind }),
  })
  try {
    await Promise.race([
      warmUp(overStdio, dir, signal),
      exited.then(() => {
        throw new Error(`the agent ended during its warm-up: ${channel.log.trim().slice(-1000)}`)
      }),
    ])
    // Warms the listeners' way in too, where they could listen: a temporary
    // directory whose path is too long for a unix socket (over 107 bytes)
    // only leaves that part out of the cache.
    for (const path of [directSocket, hostSocket]) {
      const overSocket = new AgentClient({
        secret,
        description: 'agent making its code cache',
        dial: dialUnix(path),
        maxConnectAttempts: 1,
      })
      await overSocket.health(signal).catch(() => {})
      overSocket.close()
    }
    overStdio.close()
    channel.close()
    const [code, killed] = await exited
    if (signal.aborted) throw new Error(`the agent's warm-up took over ${MAKE_TIMEOUT_MS} ms`)
    if (!existsSync(options.out))
      throw new Error(
        `the agent ended (${killed ?? code}) without writing its code cache: ${channel.log.trim().slice(-1000)}`,
      )
  } finally {
    signal.removeEventListener('abort', killOnTimeout)
    if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL')
    await rm(dir, { recursive: true, force: true })
  }
}

/**
 * `path`, or a copy of it in `dir` that this process may run: a package
 * manager's pack keeps no file modes but a `bin`'s, so cordon-launcher
 * installed from the registry is not executable where it lies (the Docker
 * backend sets its mode when it copies it into the runtime volume).
 */
async function executable(path: string, dir: string): Promise<string> {
  try {
    await access(path, constants.X_OK)
    return path
  } catch {
    const copy = join(dir, basename(path))
    await copyFile(path, copy)
    await chmod(copy, 0o700)
    return copy
  }
}

/** What a sandbox's first moments ask of its agent. */
async function warmUp(client: AgentClient, dir: string, signal: AbortSignal): Promise<void> {
  await waitForAgent(client, 'code-cache', signal)
  const session = await client.startExec(
    { command: 'true', args: [], env: { PATH: '/usr/bin:/bin' }, cwd: dir, stdin: false },
    { onStdout: () => {}, onStderr: () => {} },
    signal,
  )
  const exit = await session.result
  if (exit.exitCode !== 0) throw new Error(`true exited ${exit.exitCode} in the warm-up`)
  const path = join(dir, 'warm-up.txt')
  const content = new TextEncoder().encode('warm-up\n')
  await client.writeFile(path, toIterable(content), { size: content.byteLength, signal })
  const download = await client.readFile(path, signal)
  for await (const _chunk of download.chunks) {
    // Read through, as a caller would.
  }
  await client.stat(path, false, signal)
  await client.listFiles(dir, signal)
  await client.remove(path, false, signal)
}

async function* toIterable(bytes: Uint8Array): AsyncIterable<Uint8Array> {
  yield bytes
}
