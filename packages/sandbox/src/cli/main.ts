#!/usr/bin/env node
import { BUILD_USAGE, buildCommand } from './build-command.js'
import { demoCommand } from './demo-command.js'
import { EXIT_CORDON_FAILURE, EXIT_USAGE } from './exit-codes.js'
import { gcCommand } from './gc-command.js'
import { prepareCommand } from './prepare-command.js'
import { reportError } from './report-error.js'
import { RUN_USAGE, type RunIo, runCommand } from './run-command.js'
import { shellCommand } from './shell-command.js'

const USAGE = `usage: cordon <command>

  run [options] -- COMMAND [ARGS...]   run one command in a fresh sandbox
  shell [options] [-- COMMAND ...]     an interactive terminal in a fresh sandbox
  demo [--image I] [--runtime R]       show cordon's main job step by step
  gc [--dry-run]                       remove leftovers of owners known to be gone
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

async function main(argv: readonly string[]): Promise<number> {
  const [command, ...rest] = argv
  switch (command) {
    case 'run':
      return runCommand(rest, io)
    case 'shell':
      return shellCommand(rest, {
        stdin: process.stdin,
        stdout: process.stdout,
        stderr: io.stderr,
        onResize: (listener) => {
          process.stdout.on('resize', listener)
          return () => process.stdout.off('resize', listener)
        },
      })
    case 'demo':
      return demoCommand(rest, io)
    case 'gc':
      return gcCommand(rest, io)
    case 'prepare':
      return prepareCommand(rest, io)
    case 'build':
      return buildCommand(rest, io)
    case undefined:
    case 'help':
    case '--help':
    case '-h':
      io.stdout(`${USAGE}\n`)
      return command === undefined ? EXIT_USAGE : 0
    default:
      io.stderr(`cordon: unknown command "${command}"\n${USAGE}\n`)
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
