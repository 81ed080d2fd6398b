import type { Readable, Writable } from 'node:stream'
import { parseArgs } from 'node:util'
import { createSandboxProvider } from '../create-sandbox-provider.js'
import { EXIT_USAGE } from './exit-codes.js'
import { imagePullReporter } from './image-pull-report.js'
import { providerConfigFromFlags, SANDBOX_FLAG_OPTIONS, splitAtSeparator } from './sandbox-flags.js'

export const SHELL_USAGE = `usage: cordon shell [--image IMAGE] [--runtime docker|runsc] [--memory MB]
                    [--outputs HOST_DIR] [-- COMMAND [ARGS...]]

Opens an interactive terminal (default: /bin/sh) in a fresh hardened sandbox
with no network, and destroys the sandbox when the program exits. What the
program prints goes to your terminal as it is: it is a terminal session.`

/** The local terminal `cordon shell` attaches to (process.stdin and stdout, or test streams). */
export interface ShellIo {
  readonly stdin: Readable & { isTTY?: boolean; setRawMode?: (raw: boolean) => unknown }
  readonly stdout: Writable & { columns?: number; rows?: number }
  readonly stderr: (text: string) => void
  /** Calls `listener` whenever the local terminal is resized; returns the unsubscribe. */
  readonly onResize?: (listener: () => void) => () => void
}

/** `cordon shell`: a terminal on a fresh sandbox, local keystrokes in, its screen out. */
export async function shellCommand(argv: readonly string[], io: ShellIo): Promise<number> {
  const { flags, command } = splitAtSeparator(argv)
  const { values } = parseArgs({
    args: flags,
    options: {
      ...SANDBOX_FLAG_OPTIONS,
      help: { type: 'boolean', short: 'h', default: false },
    },
    allowPositionals: false,
  })
  if (values.help) {
    io.stderr(`${SHELL_USAGE}\n`)
    return EXIT_USAGE
  }
  const provider = createSandboxProvider({
    ...providerConfigFromFlags(values),
    onEvent: imagePullReporter(io.stderr, false),
  })
  const size = () => ({ cols: io.stdout.columns || 80, rows: io.stdout.rows || 24 })
  const raw = io.stdin.isTTY === true && typeof io.stdin.setRawMode === 'function'
  try {
    const sandbox = await provider.create({
      ...(values.memory ? { memoryLimitMb: Number(values.memory) } : {}),
    })
    const terminal = await sandbox.openTerminal({
      ...(command[0] ? { command: command[0], args: command.slice(1) } : {}),
      size: size(),
    })
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
  } finally {
    await provider.close()
  }
}
