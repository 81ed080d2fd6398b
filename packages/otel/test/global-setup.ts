import { execFileSync } from 'node:child_process'
import { randomUUID } from 'node:crypto'
import { TEST_RUN_LABEL } from './docker-provider.js'

/** Containers of this run that still exist. */
function leftovers(runId: string): string[] {
  return execFileSync(
    'docker',
    ['ps', '--all', '--quiet', '--filter', `label=${TEST_RUN_LABEL}=${runId}`],
    { encoding: 'utf8' },
  )
    .split('\n')
    .filter(Boolean)
}

/**
 * Gives the run an id that every sandbox it creates is labelled with, and
 * fails the run if any labelled container is left when it ends.
 */
export default async function setup(): Promise<() => Promise<void>> {
  process.env.CORDON_TEST_RUN_ID ??= `otel-${randomUUID()}`
  const runId = process.env.CORDON_TEST_RUN_ID
  return async () => {
    let left = leftovers(runId)
    // A removal the engine has accepted may still be in progress.
    for (let attempt = 0; attempt < 20 && left.length > 0; attempt++) {
      await new Promise((resolve) => setTimeout(resolve, 500))
      left = leftovers(runId)
    }
    if (left.length > 0) throw new Error(`test run left containers: ${left.join(' ')}`)
  }
}
