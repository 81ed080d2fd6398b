#!/usr/bin/env node
import { BUILD_USAGE, buildCommand } from './build-command.js'
import { asksForHelp, UsageError } from './command-line.js'
import { DEMO_USAGE, demoCommand } from './demo-command.js'
import { EXIT_CORDON_FAILURE, EXIT_USAGE } from './exit-codes.js'
import { GC_USAGE, gcCommand } from './gc-command.js'
import { LocalSignals } from './local-signals.js'
import { PREPARE_USAGE, prepareCommand } from './prepare-command.js'
import { reportError } from './report-error.js'
import { RUN_USAGE, type RunIo, runCommand } from './run-command.js'
import { SHELL_USAGE, shellCommand } from './shell-command.js'

const USAGE = `usage: cordon <command> [--help]

  run [options] -- COMMAND [ARGS...]   run one command in a fresh sandbox
  shell [options] [-- COMMAND ...]     an interactive terminal in a fresh sandbox
  demo [--image I] [--runtime R]       show cordon's main job step by step
  gc [--dry-run]                       remove leftovers of owners known to be gone
     [--aci F] [--microvm F]           (and ended detached sandboxes of ACI, microVM)
  prepare [--image I]                  fill the agent runtime volume on the engine now
                                       (and pull the image if the engine lacks it)
  build --tag T [options] DIR          build an image from a Dockerfile directory

${RUN_USAGE}

${BUILD_USAGE}`

const io: RunIo = {
  stdout: (text) => process.stdout.write(text),
  stderr: (text) => process.stderr.write(text),
  terminal: { stdout: process.stdout.isTTY === true, stderr: process.stderr.isTTY === true },
}

// A reader of cordon's output that went away is each command's to handle
// (run and shell stop the sandbox's program); elsewhere it is no crash.
process.stdout.on('error', () => {})
process.stderr.on('error', () => {})

/** Each command is given the one {@link LocalSignals}: a signal to cordon ends what it does. */
const COMMANDS: Readonly<
  Record<string, { usage: string; run: (argv: string[], signals: LocalSignals) => Promise<number> }>
> = {
  run: {
    usage: RUN_USAGE,
    run: (argv, signals) =>
      runCommand(
        argv,
        { stdin: process.stdin, stdout: process.stdout, stderr: process.stderr },
        signals,
      ),
  },
  shell: {
    usage: SHELL_USAGE,
    run: (argv, signals) =>
      shellCommand(
        argv,
        {
          stdin: process.stdin,
          stdout: process.stdout,
          stderr: process.stderr,
          onResize: (listener) => {
            process.stdout.on('resize', listener)
            return () => process.stdout.off('resize', listener)
          },
        },
        signals,
      ),
  },
  demo: { usage: DEMO_USAGE, run: (argv, signals) => demoCommand(argv, io, signals.signal) },
  gc: { usage: GC_USAGE, run: (argv, signals) => gcCommand(argv, io, signals.signal) },
  prepare: {
    usage: PREPARE_USAGE,
    run: (argv, signals) => prepareCommand(argv, io, signals.signal),
  },
  build: { usage: BUILD_USAGE, run: (argv, signals) => buildCommand(argv, io, signals.signal) },
}

function commandNamed(name: string) {
  return Object.hasOwn(COMMANDS, name) ? COMMANDS[name] : undefined
}

function unknownCommand(name: string): number {
  io.stderr(
    `cordon: unknown command "${name}"; the commands are ${Object.keys(COMMANDS).join(', ')} (cordon --help)\n`,
  )
  return EXIT_USAGE
}

async function main(argv: readonly string[]): Promise<number> {
  const [name, ...rest] = argv
  if (name === undefined) {
    io.stderr(`${USAGE}\n`)
    return EXIT_USAGE
  }
  if (name === 'help' || name === '--help' || name === '-h') {
    const topic = name === 'help' ? rest[0] : undefined
    if (topic === undefined || topic === '--help' || topic === '-h') {
      io.stdout(`${USAGE}\n`)
      return 0
    }
    const asked = commandNamed(topic)
    if (!asked) return unknownCommand(topic)
    io.stdout(`${asked.usage}\n`)
    return 0
  }
  const command = commandNamed(name)
  if (!command) return unknownCommand(name)
  if (asksForHelp(rest)) {
    io.stdout(`${command.usage}\n`)
    return 0
  }
  using signals = new LocalSignals()
  try {
    return await command.run(rest, signals)
  } catch (error) {
    // Once a signal asked cordon to stop, what the command failed with (an abort, an
    // engine call cut off) is the signal's doing: cordon exits as a shell reports a
    // program that signal ended, whichever command it was.
    if (signals.exitCode !== undefined) {
      io.stderr('cordon: interrupted\n')
      return signals.exitCode
    }
    if (!(error instanceof UsageError)) throw error
    io.stderr(`cordon ${name}: ${error.message}\n(cordon ${name} --help shows its usage)\n`)
    return EXIT_USAGE
  }
}

main(process.argv.slice(2)).then(
  (code) => {
    process.exitCode = code
  },
  (error: unknown) => {
    reportError(error)
    process.exitCode = EXIT_CORDON_FAILURE
  },
)
