import type { Readable, Writable } from 'node:stream'
import { type CordonSandbox, escapeTerminalControls } from '@cordon/core'
import { createSandboxProvider } from '../create-sandbox-provider.js'
import { parseFlags } from './command-line.js'
import { imagePullReporter } from './image-pull-report.js'
import {
  flagErrorOf,
  memoryFromFlags,
  providerConfigFromFlags,
  SANDBOX_FLAG_OPTIONS,
  splitAtSeparator,
  withFlagErrors,
} from './sandbox-flags.js'

export const SHELL_USAGE = `usage: cordon shell [--image IMAGE] [--runtime docker|runc|runsc] [--memory MB]
                    [--outputs HOST_DIR] [-- COMMAND [ARGS...]]

Opens an interactive terminal (default: /bin/sh) in a fresh hardened sandbox
with no network, and destroys the sandbox when the program exits, with its
exit status. What the program prints goes to your terminal as it is: it is a
terminal session. When stdin is not a terminal (a pipe, a file), the program
runs without one instead: it reads stdin to its end, its output is handled as
cordon run's is, and cordon exits with its status.`

/** The local terminal `cordon shell` attaches to (process.stdin and stdout, or test streams). */
export interface ShellIo {
  readonly stdin: Readable & { isTTY?: boolean; setRawMode?: (raw: boolean) => unknown }
  readonly stdout: Writable & { columns?: number; rows?: number; isTTY?: boolean }
  readonly stderr: (text: string) => void
  /** Whether stderr is a terminal: output a sandbox wrote without a terminal of its own is made inert for it. */
  readonly stderrIsTerminal?: boolean
  /** Calls `listener` whenever the local terminal is resized; returns the unsubscribe. */
  readonly onResize?: (listener: () => void) => () => void
}

/**
 * `cordon shell`: a terminal on a fresh sandbox, local keystrokes in, its
 * screen out; or, when stdin is not a terminal, the program fed from stdin
 * without one.
 */
export async function shellCommand(argv: readonly string[], io: ShellIo): Promise<number> {
  const { flags, command } = splitAtSeparator(argv)
  const values = parseFlags('shell', flags, SANDBOX_FLAG_OPTIONS, true)
  const limits = memoryFromFlags(values)
  const config = await providerConfigFromFlags(values)
  const provider = withFlagErrors(values, () =>
    createSandboxProvider({ ...config, onEvent: imagePullReporter(io.stderr, false) }),
  )
  const program = { command: command[0] ?? '/bin/sh', args: command.slice(1) }
  try {
    const sandbox = await provider.create(limits).catch((error: unknown) => {
      throw flagErrorOf(error, values)
    })
    return io.stdin.isTTY === true
      ? await onTerminal(sandbox, program, io)
      : await withoutTerminal(sandbox, program, io)
  } finally {
    await provider.close()
  }
}

async function onTerminal(
  sandbox: CordonSandbox,
  program: { command: string; args: string[] },
  io: ShellIo,
): Promise<number> {
  const size = () => ({ cols: io.stdout.columns || 80, rows: io.stdout.rows || 24 })
  const raw = typeof io.stdin.setRawMode === 'function'
  const terminal = await sandbox.openTerminal({ ...program, size: size() })
  terminal.onData((data) => io.stdout.write(data))
  const forward = (chunk: Buffer) => void terminal.write(chunk).catch(() => {})
  if (raw) io.stdin.setRawMode!(true)
  io.stdin.on('data', forward)
  io.stdin.resume()
  const stopResizing = io.onResize?.(() => void terminal.resize(size()).catch(() => {}))
  try {
    return await terminal.exited
  } finally {
    stopResizing?.()
    io.stdin.off('data', forward)
    io.stdin.pause()
    if (raw) io.stdin.setRawMode!(false)
  }
}

/**
 * The program as a plain process: stdin goes to it as it arrives (the next
 * chunk is read once the last one was delivered) and is closed at its end,
 * so a shell reading commands from a pipe ends when the pipe does.
 */
async function withoutTerminal(
  sandbox: CordonSandbox,
  program: { command: string; args: string[] },
  io: ShellIo,
): Promise<number> {
  const interrupt = new AbortController()
  const onSignal = () => interrupt.abort()
  process.once('SIGINT', onSignal)
  process.once('SIGTERM', onSignal)
  const inert = (text: string, terminal: boolean) =>
    terminal ? escapeTerminalControls(text) : text
  try {
    const running = await sandbox.start(program.command, program.args, {
      onOutput: (chunk) =>
        chunk.stream === 'stdout'
          ? io.stdout.write(inert(chunk.data, io.stdout.isTTY === true))
          : io.stderr(inert(chunk.data, io.stderrIsTerminal === true)),
      signal: interrupt.signal,
    })
    const forward = (chunk: Buffer) => {
      io.stdin.pause()
      running.write(chunk).then(
        () => io.stdin.resume(),
        () => io.stdin.destroy(),
      )
    }
    const close = () => void running.closeStdin().catch(() => {})
    io.stdin.on('data', forward)
    io.stdin.once('end', close)
    io.stdin.resume()
    try {
      const result = await running.wait()
      if (result.aborted) io.stderr("cordon: interrupted; the command's process tree was killed\n")
      return result.exitCode >= 0 ? result.exitCode : 1
    } finally {
      io.stdin.off('data', forward)
      io.stdin.off('end', close)
      io.stdin.pause()
    }
  } finally {
    process.off('SIGINT', onSignal)
    process.off('SIGTERM', onSignal)
  }
}
