import { escapeTerminalControls } from '@cordon/core'
import { createSandboxProvider } from '../create-sandbox-provider.js'
import { environmentFlag, parseFlags, UsageError, wholeNumberFlag } from './command-line.js'
import { imagePullReporter } from './image-pull-report.js'
import {
  flagErrorOf,
  memoryFromFlags,
  providerConfigFromFlags,
  SANDBOX_FLAG_OPTIONS,
  splitAtSeparator,
  withFlagErrors,
} from './sandbox-flags.js'

export const RUN_USAGE = `usage: cordon run [--image IMAGE] [--runtime docker|runc|runsc] [--memory MB]
                  [--pids N] [--timeout MS] [--outputs HOST_DIR] [--env KEY=VALUE]...
                  [--raw] -- COMMAND [ARGS...]

Runs COMMAND (an argv, never a shell) in a fresh hardened sandbox with no
network, streams its output, and exits with its exit code. An IMAGE the
engine lacks is pulled first, with its progress on stderr. Output bound for
a terminal has its control characters shown as escapes (\\x1b, \\r), so the
sandbox cannot drive your terminal; --raw passes them through.`

export interface RunIo {
  readonly stdout: (text: string) => void
  readonly stderr: (text: string) => void
  /** Which of the two is a terminal: output a sandbox wrote is made inert for it. */
  readonly terminal?: { readonly stdout: boolean; readonly stderr: boolean }
}

/** `cordon run`: one command in one sandbox, output streamed, exit code passed through. */
export async function runCommand(argv: readonly string[], io: RunIo): Promise<number> {
  const { flags, command } = splitAtSeparator(argv)
  const values = parseFlags(
    'run',
    flags,
    {
      ...SANDBOX_FLAG_OPTIONS,
      pids: { type: 'string' },
      timeout: { type: 'string' },
      env: { type: 'string', multiple: true, default: [] },
      raw: { type: 'boolean', default: false },
    },
    true,
  )
  if (command.length === 0 || !command[0])
    throw new UsageError('no command to run: cordon run [options] -- COMMAND [ARGS...]')
  const config = {
    ...(await providerConfigFromFlags(values)),
    onEvent: imagePullReporter(io.stderr, io.terminal?.stderr === true),
  }
  const env = environmentFlag(values.env)
  const limits = {
    ...memoryFromFlags(values),
    ...(values.pids === undefined
      ? {}
      : { maxProcesses: wholeNumberFlag('pids', values.pids, 'processes') }),
  }
  const timeout =
    values.timeout === undefined
      ? undefined
      : wholeNumberFlag('timeout', values.timeout, 'milliseconds')
  const provider = withFlagErrors(values, () => createSandboxProvider(config))
  const interrupt = new AbortController()
  const onSignal = () => interrupt.abort()
  process.once('SIGINT', onSignal)
  process.once('SIGTERM', onSignal)
  try {
    const sandbox = await provider
      .create({ env, ...limits, signal: interrupt.signal })
      .catch((error: unknown) => {
        throw flagErrorOf(error, values)
      })
    const inert = (stream: 'stdout' | 'stderr', text: string): string =>
      io.terminal?.[stream] && !values.raw ? escapeTerminalControls(text) : text
    const result = await sandbox.exec(command[0], command.slice(1), {
      onOutput: (chunk) =>
        chunk.stream === 'stdout'
          ? io.stdout(inert('stdout', chunk.data))
          : io.stderr(inert('stderr', chunk.data)),
      signal: interrupt.signal,
      ...(timeout === undefined ? {} : { timeout }),
    })
    if (result.timedOut)
      io.stderr(`cordon: timed out after ${timeout} ms; the command's process tree was killed\n`)
    if (result.oomKilled) io.stderr('cordon: the command ran out of memory and was killed\n')
    if (result.aborted) io.stderr("cordon: interrupted; the command's process tree was killed\n")
    return result.exitCode >= 0 ? result.exitCode : 1
  } finally {
    process.off('SIGINT', onSignal)
    process.off('SIGTERM', onSignal)
    await provider.close()
  }
}
