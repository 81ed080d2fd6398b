import type { Readable } from 'node:stream'
import type { CordonSandbox } from '@cordon/core'
import { createSandboxProvider } from '../create-sandbox-provider.js'
import { parseFlags } from './command-line.js'
import { CommandOutput, type OutputStream } from './command-output.js'
import { prepareEngine } from './engine-prepare.js'
import { imagePullReporter } from './image-pull-report.js'
import { LocalSignals } from './local-signals.js'
import { failedProgramExitCode, type ProgramEnd, waitForProgram } from './program-end.js'
import { sandboxEndedLine } from './sandbox-end.js'
import {
  flagErrorOf,
  memoryFromFlags,
  providerConfigFromFlags,
  SANDBOX_FLAG_OPTIONS,
  splitAtSeparator,
  withFlagErrors,
} from './sandbox-flags.js'
import { feedStdin } from './stdin-feed.js'

export const SHELL_USAGE = `usage: cordon shell [--image IMAGE] [--runtime docker|runc|runsc] [--memory MB]
                    [--outputs HOST_DIR] [--ready-timeout DURATION] [-- COMMAND [ARGS...]]

Opens an interactive terminal (default: /bin/sh) in a fresh hardened sandbox
with no network, and destroys the sandbox when the program exits, with its
exit status. What the program prints goes to your terminal as it is: it is a
terminal session. When stdin is not a terminal (a pipe, a file), the program
runs without one instead: it reads stdin to its end, its output is handled as
cordon run's is, and cordon exits with its status. An IMAGE the engine lacks
is pulled first, and --ready-timeout is the sandbox's time to start, as in
cordon run.`

/** The local terminal `cordon shell` attaches to (process.stdin and stdout, or test streams). */
export interface ShellIo {
  readonly stdin: Readable & { isTTY?: boolean; setRawMode?: (raw: boolean) => unknown }
  readonly stdout: OutputStream & { columns?: number; rows?: number }
  /** Output a sandbox wrote without a terminal of its own is made inert for it if it is a terminal. */
  readonly stderr: OutputStream
  /** Calls `listener` whenever the local terminal is resized; returns the unsubscribe. */
  readonly onResize?: (listener: () => void) => () => void
}

/**
 * `cordon shell`: a terminal on a fresh sandbox, local keystrokes in, its
 * screen out; or, when stdin is not a terminal, the program fed from stdin
 * without one. The image is made ready first, as `cordon run` does.
 * `signals` are cordon's (main.ts); without them, the call listens itself.
 */
export async function shellCommand(
  argv: readonly string[],
  io: ShellIo,
  given?: LocalSignals,
): Promise<number> {
  const { flags, command } = splitAtSeparator(argv)
  const values = parseFlags('shell', flags, SANDBOX_FLAG_OPTIONS, true)
  const limits = memoryFromFlags(values)
  const config = await providerConfigFromFlags(values)
  const say = (text: string): void => void io.stderr.write(text)
  const onEvent = imagePullReporter(say, false)
  const provider = withFlagErrors(values, () => createSandboxProvider({ ...config, onEvent }))
  const program = { command: command[0] ?? '/bin/sh', args: command.slice(1) }
  using own = given ? undefined : new LocalSignals()
  const signals = given ?? own!
  try {
    await prepareEngine(values.image, config.backend.registryAuth, {
      signal: signals.signal,
      onEvent,
    })
    const sandbox = await provider
      .create({ ...limits, signal: signals.signal })
      .catch((error: unknown) => {
        throw flagErrorOf(error, values)
      })
    return io.stdin.isTTY === true
      ? await onTerminal(sandbox, program, io, signals)
      : await withoutTerminal(sandbox, program, io, signals)
  } finally {
    await provider.close()
  }
}

async function onTerminal(
  sandbox: CordonSandbox,
  program: { command: string; args: string[] },
  io: ShellIo,
  signals: LocalSignals,
): Promise<number> {
  const size = () => ({ cols: io.stdout.columns || 80, rows: io.stdout.rows || 24 })
  const raw = typeof io.stdin.setRawMode === 'function'
  const terminal = await sandbox.openTerminal({ ...program, size: size() })
  terminal.onData((data) => io.stdout.write(data))
  const forward = (chunk: Buffer) => void terminal.write(chunk).catch(() => {})
  // SIGTERM or SIGHUP to cordon (Ctrl-C is a keystroke here, sent on to the program).
  const stop = () => void terminal.kill('SIGKILL').catch(() => {})
  signals.signal.addEventListener('abort', stop, { once: true })
  if (raw) io.stdin.setRawMode!(true)
  io.stdin.on('data', forward)
  io.stdin.resume()
  const stopResizing = io.onResize?.(() => void terminal.resize(size()).catch(() => {}))
  try {
    const status = await terminal.exited
    if (signals.exitCode !== undefined) return signals.exitCode
    // The engine reports a program the sandbox's end killed as killed (137) or unknown (-1).
    if (sandbox.status === 'destroyed' || status === 137 || status === -1) {
      const ended = await sandboxEndedLine(sandbox)
      if (ended) io.stderr.write(ended)
    }
    return status
  } finally {
    signals.signal.removeEventListener('abort', stop)
    stopResizing?.()
    io.stdin.off('data', forward)
    io.stdin.pause()
    if (raw) io.stdin.setRawMode!(false)
  }
}

/**
 * The program as a plain process: stdin goes to it as it arrives and is
 * closed at its end, so a shell reading commands from a pipe ends when the
 * pipe does; its output is handled as `cordon run`'s is.
 */
async function withoutTerminal(
  sandbox: CordonSandbox,
  program: { command: string; args: string[] },
  io: ShellIo,
  signals: LocalSignals,
): Promise<number> {
  using output = new CommandOutput(io, { raw: false })
  const say = (text: string): void => void io.stderr.write(text)
  const stop = AbortSignal.any([signals.signal, output.signal])
  signals.signal.addEventListener('abort', () => output.stop(), { once: true })
  let stopFeeding = (): void => {}
  const end: ProgramEnd = { output, signals, say, stopFeeding: () => stopFeeding() }
  try {
    const running = await sandbox.start(program.command, program.args, {
      onOutputBytes: output.onOutputBytes,
      signal: stop,
    })
    stopFeeding = feedStdin(running, io.stdin)
    const ended = await waitForProgram(running, end)
    if ('exitCode' in ended) return ended.exitCode
    return ended.result.exitCode >= 0 ? ended.result.exitCode : 1
  } catch (error) {
    return await failedProgramExitCode(error, sandbox, end, undefined)
  }
}
