import { randomBytes } from 'node:crypto'
import { type ArmStandin, type ArmStandinOptions, startArmStandin } from '@cordon/arm-standin'
import { testRunLabels } from './test-run.js'

export type TestArmStandin = ArmStandin & { readonly token: string }

/**
 * Starts the ARM stand-in for one test file, with a fresh token and its
 * containers and network labelled with the run, and waits for its pool to
 * settle. LRO answers carry `Retry-After: 0` unless a test asks otherwise, to
 * keep wall time down; the client still waits its minimum poll interval.
 * `entrypointPath` is `aciEntrypointPath()` of `@cordon/backend-aci`.
 */
export async function startTestArmStandin(
  options: Partial<ArmStandinOptions> & Pick<ArmStandinOptions, 'entrypointPath'>,
): Promise<TestArmStandin> {
  const token = options.token ?? randomBytes(24).toString('base64url')
  const standin = await startArmStandin({
    retryAfterSeconds: 0,
    ...options,
    token,
    labels: { ...testRunLabels(), ...options.labels },
  })
  await standin.poolSettled()
  return Object.assign(standin, { token })
}

/**
 * Closes the stand-in: the ACI leak check. A container group still claimed is
 * a sandbox the backend failed to delete.
 */
export async function closeTestArmStandin(standin: ArmStandin | undefined): Promise<void> {
  if (!standin) return
  const leaked = standin.groups()
  await standin.close()
  if (leaked.length > 0) throw new Error(`container groups were left claimed: ${leaked.join(', ')}`)
}
