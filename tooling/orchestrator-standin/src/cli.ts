#!/usr/bin/env node
/**
 * Runs the stand-in for local development:
 *
 *   CORDON_STANDIN_TOKEN=dev-token cordon-orchestrator-standin [port]
 *
 * and point a microvm provider at the printed URL with the same token.
 */
import { startOrchestratorStandin } from './standin-server.js'

const token = process.env.CORDON_STANDIN_TOKEN
if (!token) {
  process.stderr.write('set CORDON_STANDIN_TOKEN to the bearer token clients must present\n')
  process.exit(2)
}
const standin = await startOrchestratorStandin({ token, port: Number(process.argv[2] ?? 0) })
process.stdout.write(`orchestrator stand-in ${standin.id} listening on ${standin.url}\n`)
const stop = (): void => {
  void standin.close().finally(() => process.exit(0))
}
process.on('SIGINT', stop)
process.on('SIGTERM', stop)
