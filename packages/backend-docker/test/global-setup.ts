import { randomUUID } from 'node:crypto'

/**
 * Gives the run an id that every test resource is labelled with, and fails the
 * run if any labelled container, volume, network or image is left when it ends.
 */
export default async function setup(): Promise<() => Promise<void>> {
  process.env.CORDON_TEST_RUN_ID ??= `run-${randomUUID()}`
  return async () => {
    const { leftovers } = await import('./test-run.js')
    // Removal after a failed create is swept again up to eight seconds later; give it that long.
    let found = await leftovers()
    for (
      let attempt = 0;
      attempt < 24 &&
      found.containers.length + found.volumes.length + found.networks.length + found.images.length >
        0;
      attempt++
    ) {
      await new Promise((resolve) => setTimeout(resolve, 500))
      found = await leftovers()
    }
    const total =
      found.containers.length + found.volumes.length + found.networks.length + found.images.length
    if (total > 0) {
      throw new Error(`test run leaked ${total} engine resources: ${JSON.stringify(found)}`)
    }
  }
}
