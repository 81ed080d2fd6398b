import {
  type CordonSandbox,
  SandboxDestroyedError,
  type SandboxExecResult,
  type SandboxProcess,
} from '@cordon/core'
import type { CommandOutput } from './command-output.js'
import { EXIT_BROKEN_PIPE, EXIT_CORDON_FAILURE } from './exit-codes.js'
import type { LocalSignals } from './local-signals.js'
import { sandboxEndedLine } from './sandbox-end.js'

/**
 * How `cordon run` and `cordon shell` end a program they started: the same
 * three things outrank the program's own exit code in both (cordon's output
 * failed, a signal came to cordon, the sandbox ended underneath it), so they
 * are decided here once.
 */
export interface ProgramEnd {
  readonly output: CommandOutput
  readonly signals: LocalSignals
  readonly say: (text: string) => void
  /** Stops feeding cordon's stdin to the program (a no-op when it was not fed). */
  readonly stopFeeding: () => void
}

/**
 * Waits for `running` to end and flushes its output. Returns cordon's exit
 * code when the output or a signal decides it, else the program's result.
 */
export async function waitForProgram(
  running: SandboxProcess,
  end: ProgramEnd,
): Promise<{ readonly exitCode: number } | { readonly result: SandboxExecResult }> {
  const result = await running.wait()
  end.stopFeeding()
  end.output.finish()
  const decided = decidedExitCode(
    end,
    "cordon: interrupted; the command's process tree was killed\n",
  )
  return decided === undefined ? { result } : { exitCode: decided }
}

/**
 * cordon's exit code for a program that failed with `error`: what the output
 * or a signal decides (`interrupted` is said when a signal does), else 125
 * with the line saying the sandbox ended and why, if it did. Any other
 * error is rethrown.
 */
export async function failedProgramExitCode(
  error: unknown,
  sandbox: CordonSandbox | undefined,
  end: ProgramEnd,
  interrupted: string | undefined,
): Promise<number> {
  end.stopFeeding()
  const decided = decidedExitCode(end, interrupted)
  if (decided !== undefined) return decided
  if (sandbox && SandboxDestroyedError.isInstance(error)) {
    const ended = await sandboxEndedLine(sandbox)
    if (ended) {
      end.say(ended)
      return EXIT_CORDON_FAILURE
    }
  }
  throw error
}

function decidedExitCode(end: ProgramEnd, interrupted: string | undefined): number | undefined {
  if (end.output.failed) return brokenOutputCode(end.output.failed, end.say)
  if (end.signals.exitCode === undefined) return undefined
  if (interrupted) end.say(interrupted)
  return end.signals.exitCode
}

/**
 * The exit code when cordon's own output failed: 141 (128 + SIGPIPE, as a
 * shell reports a program a closed pipe ended) without a word when its
 * reader went away, else 125 with what failed.
 */
function brokenOutputCode(
  broken: { readonly stream: 'stdout' | 'stderr'; readonly error: NodeJS.ErrnoException },
  say: (text: string) => void,
): number {
  if (broken.error.code === 'EPIPE') return EXIT_BROKEN_PIPE
  if (broken.stream === 'stdout')
    say(
      `cordon: could not write the command's output: ${broken.error.message}; the command was stopped\n`,
    )
  return EXIT_CORDON_FAILURE
}
