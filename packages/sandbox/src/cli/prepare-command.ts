import { parseFlags } from './command-line.js'
import { registryAuthForImage } from './docker-cli-credentials.js'
import { prepareEngine } from './engine-prepare.js'
import { imagePullReporter } from './image-pull-report.js'
import type { RunIo } from './run-command.js'
import { DEFAULT_IMAGE } from './sandbox-flags.js'

export const PREPARE_USAGE = `usage: cordon prepare [--image IMAGE]

Fills the agent runtime volume on the Docker Engine now (cordon's agent and
its egress gateway run from it), so that no sandbox's first create pays for
it. IMAGE runs the short-lived container that fills it: any image your
sandboxes use. Doing it again finds it there.`

/**
 * `cordon prepare`: fills the agent runtime volume on the engine now (cordon's
 * agent and the egress gateway run from it), so that no sandbox's first
 * `create()` pays for it, and pulls the image first if the engine lacks it
 * (with no deadline: a large image pulled here costs no create its budget).
 * Idempotent. `signal` (a signal to cordon) ends the pull.
 */
export async function prepareCommand(
  argv: readonly string[],
  io: RunIo,
  signal: AbortSignal,
): Promise<number> {
  const values = parseFlags(
    'prepare',
    argv,
    {
      image: { type: 'string', default: process.env.CORDON_IMAGE ?? DEFAULT_IMAGE },
      help: { type: 'boolean', short: 'h' },
    },
    false,
  )
  const registryAuth = await registryAuthForImage(values.image)
  const volume = await prepareEngine(values.image, registryAuth, {
    signal,
    onEvent: imagePullReporter(io.stderr, io.terminal?.stderr === true),
  })
  io.stdout(`cordon prepare: the agent runtime is in volume ${volume}\n`)
  return 0
}
