import type Docker from 'dockerode'
import { isBeingRemoved, isNotFound } from './engine-errors.js'

/** How long a removal the engine already started is waited for: 10 s. */
const REMOVAL_WAIT_ATTEMPTS = 200
const REMOVAL_WAIT_INTERVAL_MS = 50

/**
 * Removes a container (forced, with its anonymous volumes) and resolves once
 * the engine no longer has it. One already gone counts as removed. One the
 * engine is already removing (`AutoRemove` after its process ended, or a
 * build's own cleanup of a step) answers "removal in progress" at once and
 * still exists: that removal is waited for, so that what the container held
 * (an image, a volume, its name) is free when this returns.
 */
export async function removeContainerAndWait(container: Docker.Container): Promise<void> {
  try {
    // `v`: its anonymous volumes (a gVisor agent's socket directory) go with it.
    await container.remove({ force: true, v: true })
    return
  } catch (error) {
    if (isNotFound(error)) return
    if (!isBeingRemoved(error)) throw error
  }
  for (let attempt = 0; attempt < REMOVAL_WAIT_ATTEMPTS; attempt++) {
    const gone = await container.inspect().then(
      () => false,
      (error: unknown) => {
        if (isNotFound(error)) return true
        throw error
      },
    )
    if (gone) return
    await new Promise((resolve) => setTimeout(resolve, REMOVAL_WAIT_INTERVAL_MS))
  }
}
