#!/usr/bin/env node
/**
 * Runs the stand-in for local development:
 *
 *   CORDON_ARM_STANDIN_TOKEN=dev-token \
 *   CORDON_ARM_STANDIN_ENTRYPOINT=packages/backend-aci/cordon-aci-entrypoint.sh \
 *   cordon-arm-standin [port]
 *
 * It prints the backend config to use (with `getArmToken` returning the same token).
 */
import { resolve } from 'node:path'
import { startArmStandin } from './arm-standin.js'

const token = process.env.CORDON_ARM_STANDIN_TOKEN
const entrypoint = process.env.CORDON_ARM_STANDIN_ENTRYPOINT
if (!token || !entrypoint) {
  process.stderr.write(
    'set CORDON_ARM_STANDIN_TOKEN (the bearer token clients must present) and CORDON_ARM_STANDIN_ENTRYPOINT (path of cordon-aci-entrypoint.sh)\n',
  )
  process.exit(2)
}
const standin = await startArmStandin({
  token,
  entrypointPath: resolve(entrypoint),
  port: Number(process.argv[2] ?? 0),
})
process.stdout.write(`${JSON.stringify(standin.backendConfig(), null, 2)}\n`)
const stop = (): void => {
  void standin.close().finally(() => process.exit(0))
}
process.on('SIGINT', stop)
process.on('SIGTERM', stop)
