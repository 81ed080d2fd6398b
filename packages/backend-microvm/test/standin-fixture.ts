import { randomBytes } from 'node:crypto'
import {
  type OrchestratorStandin,
  type OrchestratorStandinOptions,
  startOrchestratorStandin,
} from '@cordon/orchestrator-standin'

/** Labels every container a test run makes, so leftovers of a crashed run can be found. */
export const TEST_RUN_LABELS = {
  'cordon.test-run': process.env.CORDON_TEST_RUN_ID ?? `local-${process.pid}`,
}

/** Starts a stand-in with a fresh token for one test file; close it in afterAll. */
export async function startTestStandin(
  options: Partial<OrchestratorStandinOptions> = {},
): Promise<OrchestratorStandin & { readonly token: string }> {
  const token = options.token ?? randomBytes(24).toString('base64url')
  const standin = await startOrchestratorStandin({
    ...options,
    token,
    labels: { ...TEST_RUN_LABELS, ...options.labels },
  })
  return Object.assign(standin, { token })
}
