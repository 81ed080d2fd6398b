import { parseArgs } from 'node:util'
import { loadDockerBackend } from './docker-backend-module.js'
import type { RunIo } from './run-command.js'

/** `cordon gc`: removes engine resources whose owning process is gone, and agent runtimes nothing uses. */
export async function gcCommand(argv: readonly string[], io: RunIo): Promise<number> {
  const { values } = parseArgs({
    args: [...argv],
    options: { 'dry-run': { type: 'boolean', default: false } },
  })
  const backend = await loadDockerBackend()
  const { docker, endpoint } = backend.connectEngine({})
  const report = await backend.collectGarbage({ docker, dryRun: values['dry-run'] })
  const verb = values['dry-run'] ? 'would remove' : 'removed'
  io.stdout(
    `cordon gc (${endpoint}): ${verb} ${report.containers.length} containers, ${report.volumes.length} volumes, ${report.networks.length} networks; kept ${report.kept} (live or foreign owners, agent runtimes in use)\n`,
  )
  for (const failure of report.failed)
    io.stderr(`cordon gc: could not remove ${failure.id}: ${failure.reason}\n`)
  return report.failed.length > 0 ? 1 : 0
}
