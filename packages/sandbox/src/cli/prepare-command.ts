import { parseArgs } from 'node:util'
import { loadDockerBackend } from './docker-backend-module.js'
import type { RunIo } from './run-command.js'
import { DEFAULT_IMAGE } from './sandbox-flags.js'

/**
 * `cordon prepare`: fills the agent runtime volume on the engine now (cordon's
 * agent and the egress gateway run from it), so that no sandbox's first
 * `create()` pays for it. Idempotent.
 */
export async function prepareCommand(argv: readonly string[], io: RunIo): Promise<number> {
  const { values } = parseArgs({
    args: [...argv],
    options: { image: { type: 'string', default: process.env.CORDON_IMAGE ?? DEFAULT_IMAGE } },
  })
  const backend = await loadDockerBackend()
  const { volume } = await backend.prepareAgentRuntime({ image: values.image })
  io.stdout(`cordon prepare: the agent runtime is in volume ${volume}\n`)
  return 0
}
