import { randomUUID } from 'node:crypto'

/**
 * Names the run (every container and network the stand-ins make is labelled
 * with it) and fails the run if any of them is still there at the end.
 */
export default async function setup(): Promise<() => Promise<void>> {
  process.env.CORDON_TEST_RUN_ID ??= `run-${randomUUID()}`
  return async () => {
    const { engineLeftovers } = await import('./test-run.js')
    const found = await engineLeftovers()
    if (found.length > 0)
      throw new Error(`the test run leaked ${found.length} engine resources: ${found.join(', ')}`)
  }
}
