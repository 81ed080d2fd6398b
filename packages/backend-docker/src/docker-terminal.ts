import { randomBytes } from 'node:crypto'
import type { Duplex } from 'node:stream'
import { EXEC_MARKER_VARIABLE } from '@cordon/agent'
import type { AgentClient } from '@cordon/agent/sandbox'
import {
  SandboxConfigValidationError,
  SandboxControlRefusedError,
  type SandboxId,
  SandboxOperationError,
  type SandboxTerminal,
  type SandboxTerminalOptions,
} from '@cordon/core'
import type Docker from 'dockerode'
import { engineExecExitCode } from './engine-exec-end.js'

/**
 * Interactive terminals on Docker sandboxes.
 *
 * cordon's agent is pure JavaScript and Node cannot allocate a
 * pseudo-terminal, so a terminal is the one thing that goes through the
 * engine's exec API (with `Tty`): the engine makes the pty, and the program
 * runs as the sandbox's user with the container's hardening (no capabilities,
 * no-new-privileges, its rlimits and cgroup), started through cordon-launcher
 * where the runtime holds one, which under gVisor is what leaves it without
 * capabilities (a terminal there without one is refused). Opening one
 * therefore costs the engine's exec round trips (tens of milliseconds),
 * which an interactive session does not notice. The program is not the
 * agent's child, so it carries an exec marker in its environment, and
 * `kill` asks the agent to signal every process with that marker and their
 * descendants, which is everything started on the terminal.
 */

export interface DockerTerminalContext {
  readonly docker: Docker
  readonly containerId: string
  readonly sandboxId: SandboxId
  readonly user: { readonly uid: number; readonly gid: number }
  /** The sandbox's environment (image, create's `env`, proxy settings). */
  readonly env: Readonly<Record<string, string>>
  readonly workingDirectory: string
  readonly agent: AgentClient
  /**
   * cordon-launcher in the runtime, if it holds one: the program then starts
   * under the launcher's system call filter (`--exec`), as every command the
   * agent starts does.
   */
  readonly launcher: string | undefined
  /** The sandbox's backend, as `tier:runtime`, named in a refusal. */
  readonly backend: string
  /** Whether the sandbox runs under gVisor (see {@link openDockerTerminal}). */
  readonly gvisor: boolean
}

const MAX_CELLS = 10_000
/** Output kept for a first `onData` listener that subscribes after the program started. */
const MAX_EARLY_BYTES = 1024 * 1024
/** How long a failed resize waits for the program's output to end before asking the engine. */
const OUTPUT_END_WAIT_MS = 2_000

export async function openDockerTerminal(
  context: DockerTerminalContext,
  options: SandboxTerminalOptions,
): Promise<SandboxTerminal> {
  validate(options)
  // Under gVisor the first process of an engine exec keeps the container's
  // capabilities (the agent's: CAP_DAC_OVERRIDE, CAP_SETUID and more)
  // though it runs as the sandbox's user; an execve() as that user is what
  // drops them. The launcher's `--exec` is that execve; without a launcher
  // the terminal's program would hold rights no command of the sandbox has.
  if (context.gvisor && context.launcher === undefined)
    throw new SandboxControlRefusedError(
      'openTerminal',
      context.backend,
      `under gVisor a terminal starts through cordon-launcher, and @cordon/agent has none for this architecture (linux/${process.arch})`,
    )
  const marker = randomBytes(16).toString('hex')
  const env = {
    TERM: 'xterm-256color',
    ...context.env,
    ...options.env,
    [EXEC_MARKER_VARIABLE]: marker,
  }
  const exec = await context.docker.getContainer(context.containerId).exec({
    Cmd: [
      ...(context.launcher ? [context.launcher, '--exec'] : []),
      options.command ?? '/bin/sh',
      ...(options.args ?? []),
    ],
    Env: Object.entries(env).map(([key, value]) => `${key}=${value}`),
    User: `${context.user.uid}:${context.user.gid}`,
    WorkingDir: options.cwd ?? context.workingDirectory,
    Tty: true,
    AttachStdin: true,
    AttachStdout: true,
    AttachStderr: true,
  })
  const stream = (await exec.start({ hijack: true, stdin: true, Tty: true })) as Duplex
  const listeners = new Set<(data: Uint8Array) => void>()
  // What the program shows before the host subscribes (its first prompt) is kept for the first listener.
  let early: Buffer[] | undefined = []
  let earlyBytes = 0
  stream.on('data', (chunk: Buffer) => {
    if (early) {
      if (earlyBytes + chunk.length <= MAX_EARLY_BYTES) {
        early.push(chunk)
        earlyBytes += chunk.length
      }
      return
    }
    for (const listener of listeners) listener(chunk)
  })
  stream.on('error', () => {})
  const streamEnded = new Promise<void>((resolve) => {
    stream.once('end', resolve)
    stream.once('close', resolve)
  })
  // A terminal's status is a number: an engine that cannot be asked gives -1.
  const exited = streamEnded.then(() => engineExecExitCode(exec)).catch(() => -1)
  let ended = false
  let exitCode = -1
  void exited.then((code) => {
    ended = true
    exitCode = code
  })
  const resize = async (size: SandboxTerminalOptions['size']) => {
    validateSize(size)
    if (ended) return
    try {
      await exec.resize({ h: size.rows, w: size.cols })
    } catch (error) {
      // A program that ended before its terminal could be sized (this engine
      // API cannot size it at start) keeps its output and status: a size
      // means nothing to it any more.
      if (!(await programEnded())) throw error
    }
  }
  // The engine's inspect lags an exec's end (engine-lag.ts); the end
  // of the attach stream is the earlier sign, so it is awaited first, for a
  // short time (a resize that failed on a running program is reported
  // after it), before the engine is asked.
  const programEnded = async (): Promise<boolean> => {
    const noticed = await Promise.race([
      streamEnded.then(() => true),
      new Promise<boolean>((resolve) => setTimeout(resolve, OUTPUT_END_WAIT_MS, false).unref()),
    ])
    if (noticed) return true
    return exec.inspect().then(
      (info: { Running?: boolean }) => info.Running === false,
      () => false,
    )
  }
  await resize(options.size)
  const terminal: SandboxTerminal = {
    async write(data) {
      // The program's end is not the sandbox's: a host that took it for one would discard a live sandbox.
      if (ended)
        throw new SandboxOperationError(
          'write',
          `the terminal's program has exited (exit code ${exitCode}); open another terminal`,
        )
      await new Promise<void>((resolve, reject) =>
        stream.write(data, (error) => (error ? reject(error) : resolve())),
      )
    },
    resize,
    onData(listener) {
      listeners.add(listener)
      if (early) {
        const kept = early
        early = undefined
        for (const chunk of kept) listener(chunk)
      }
      return () => listeners.delete(listener)
    },
    exited,
    async kill(signal = 'SIGKILL') {
      if (ended) return
      await context.agent.signalMarked(marker, signal)
    },
    async [Symbol.asyncDispose]() {
      await terminal.kill('SIGKILL')
      stream.destroy()
      await exited
    },
  }
  return terminal
}

function validate(options: SandboxTerminalOptions): void {
  const issues: Array<{ path: string; message: string }> = []
  if (options.command !== undefined && (options.command === '' || options.command.includes('\0')))
    issues.push({ path: 'command', message: 'must be a non-empty string without NUL' })
  for (const [index, arg] of (options.args ?? []).entries())
    if (arg.includes('\0')) issues.push({ path: `args.${index}`, message: 'cannot contain NUL' })
  for (const [key, value] of Object.entries(options.env ?? {}))
    if (!/^[A-Za-z_][A-Za-z0-9_]*$/.test(key) || value.includes('\0'))
      issues.push({ path: `env.${key}`, message: 'names are letters, digits and "_"; no NUL' })
  if (options.cwd !== undefined && !options.cwd.startsWith('/'))
    issues.push({ path: 'cwd', message: 'must be an absolute path' })
  try {
    validateSize(options.size)
  } catch (error) {
    issues.push(...(error as SandboxConfigValidationError).issues)
  }
  if (issues.length > 0) throw new SandboxConfigValidationError('openTerminal options', issues)
}

function validateSize(size: SandboxTerminalOptions['size'] | undefined): void {
  const ok = (value: unknown) =>
    typeof value === 'number' && Number.isInteger(value) && value >= 1 && value <= MAX_CELLS
  if (!size || !ok(size.cols) || !ok(size.rows))
    throw new SandboxConfigValidationError('terminal size', [
      { path: 'size', message: `cols and rows must be integers from 1 to ${MAX_CELLS}` },
    ])
}
