import { createSandboxProvider } from '../create-sandbox-provider.js'
import { environmentFlag, parseFlags, UsageError, wholeNumberFlag } from './command-line.js'
import { CommandOutput, type OutputStream } from './command-output.js'
import { prepareEngine } from './engine-prepare.js'
import { imagePullReporter } from './image-pull-report.js'
import { LocalSignals } from './local-signals.js'
import { failedProgramExitCode, type ProgramEnd, waitForProgram } from './program-end.js'
import {
  flagErrorOf,
  memoryFromFlags,
  providerConfigFromFlags,
  SANDBOX_FLAG_OPTIONS,
  splitAtSeparator,
  withFlagErrors,
} from './sandbox-flags.js'
import { feedStdin, type InputStream } from './stdin-feed.js'

export const RUN_USAGE = `usage: cordon run [--image IMAGE] [--runtime docker|runc|runsc] [--memory MB]
                  [--pids N] [--timeout MS] [--outputs HOST_DIR] [--env KEY=VALUE]...
                  [--ready-timeout DURATION] [--raw] -- COMMAND [ARGS...]

Runs COMMAND (an argv, never a shell) in a fresh hardened sandbox with no
network, streams its output, and exits with its exit code. Its stdin is
cordon's when that is not a terminal (a pipe, a file), else empty. An IMAGE
the engine lacks is pulled first, with its progress on stderr and no
deadline (Ctrl-C ends it); then the sandbox has --ready-timeout to start
(default 30s; a number and a unit: 500ms, 90s, 5m). Output bound
for a terminal has its control characters shown as escapes (\\x1b, \\r), so
the sandbox cannot drive your terminal; --raw passes them through; output
bound elsewhere is passed on byte for byte. If cordon's stdout or stderr is
closed early (| head), the command is stopped and cordon exits 141.`

/** Text output, for the commands that print only their own messages. */
export interface RunIo {
  readonly stdout: (text: string) => void
  readonly stderr: (text: string) => void
  /** Which of the two is a terminal: output a sandbox wrote is made inert for it. */
  readonly terminal?: { readonly stdout: boolean; readonly stderr: boolean }
}

/** The local side of `cordon run`: process.stdin, stdout and stderr, or test streams. */
export interface RunStreams {
  readonly stdin: InputStream
  readonly stdout: OutputStream
  readonly stderr: OutputStream
}

/**
 * `cordon run`: one command in one sandbox, stdin fed to it, its output
 * streamed, its exit code passed through. The image is made ready first
 * (pulled if the engine lacks it, with no deadline; engine-prepare.ts), so
 * the create's readiness budget counts only the sandbox's own start.
 * `signals` are cordon's (main.ts); without them, the call listens itself.
 */
export async function runCommand(
  argv: readonly string[],
  io: RunStreams,
  given?: LocalSignals,
): Promise<number> {
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
  const say = (text: string): void => void io.stderr.write(text)
  const onEvent = imagePullReporter(say, io.stderr.isTTY === true)
  const config = { ...(await providerConfigFromFlags(values)), onEvent }
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
  using own = given ? undefined : new LocalSignals()
  const signals = given ?? own!
  using output = new CommandOutput(io, { raw: values.raw })
  // Stopped by a signal to cordon, or by a reader of its output that went away.
  const stop = AbortSignal.any([signals.signal, output.signal])
  // The command is being killed: a stream nobody reads must not keep cordon waiting.
  signals.signal.addEventListener('abort', () => output.stop(), { once: true })
  // A terminal's input is a person's keystrokes, which `cordon shell` is for.
  const forwardStdin = io.stdin.isTTY !== true
  let stopFeeding = (): void => {}
  const end: ProgramEnd = { output, signals, say, stopFeeding: () => stopFeeding() }
  let sandbox: Awaited<ReturnType<typeof provider.create>> | undefined
  try {
    await prepareEngine(values.image, config.backend.registryAuth, { signal: stop, onEvent })
    sandbox = await provider.create({ env, ...limits, signal: stop }).catch((error: unknown) => {
      throw flagErrorOf(error, values)
    })
    // What `exec` would apply: the sandbox's default, unless --timeout says otherwise.
    const timeoutMs = timeout ?? sandbox.enforced.execTimeoutMs
    const running = await sandbox.start(command[0], command.slice(1), {
      onOutputBytes: output.onOutputBytes,
      signal: stop,
      timeout: timeoutMs,
      openStdin: forwardStdin,
    })
    if (forwardStdin) stopFeeding = feedStdin(running, io.stdin)
    const ended = await waitForProgram(running, end)
    if ('exitCode' in ended) return ended.exitCode
    const { result } = ended
    if (result.timedOut)
      say(`cordon: timed out after ${timeoutMs} ms; the command's process tree was killed\n`)
    if (result.oomKilled) say('cordon: the command ran out of memory and was killed\n')
    return result.exitCode >= 0 ? result.exitCode : 1
  } catch (error) {
    return await failedProgramExitCode(error, sandbox, end, 'cordon: interrupted\n')
  } finally {
    await provider.close()
  }
}
