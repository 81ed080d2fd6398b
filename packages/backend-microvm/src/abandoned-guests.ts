import { LABEL, removeEach } from '@cordon/core/backend'
import type { ControlPlaneClient } from './control-plane-client.js'
import { ownerIsGone } from './gone-owner-sweep.js'
import { hasPassedEndTime } from './reconnect-state.js'

/**
 * A backend's background sweep of its control plane's guests: the detached
 * ones past their end time (detached-sweep.ts) and the ones, not detached,
 * whose creating process this machine can tell has ended
 * (gone-owner-sweep.ts), found in one listing of cordon's guests (each
 * control-plane call asks the host for a token). Resolves with the sandbox
 * ids it deleted; a guest whose deletion fails does not stop the others.
 */
export async function removeAbandonedGuests(
  controlPlane: ControlPlaneClient,
  signal: AbortSignal,
): Promise<string[]> {
  const guests = await controlPlane.listSandboxes({ [LABEL.managed]: '1' }, signal)
  const now = Date.now()
  const abandoned = guests.filter((guest) => hasPassedEndTime(guest, now) || ownerIsGone(guest))
  return removeEach(
    abandoned,
    (guest) => guest.sandboxId,
    (guest) => controlPlane.deleteSandbox(guest.sandboxId, signal),
  )
}
