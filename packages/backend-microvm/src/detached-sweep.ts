import type { MicroVMBackendConfig } from '@cordon/builtin-backends'
import { LABEL, removeEach } from '@cordon/core/backend'
import { type GuestSweepOptions, runConfiguredSweep } from './configured-sweep.js'
import type { ControlPlaneClient } from './control-plane-client.js'
import { hasPassedEndTime } from './reconnect-state.js'

/**
 * Deletes every detached guest of cordon's on the control plane whose end
 * time (`cordon.expires`) has passed, paused ones included, and resolves
 * with their sandbox ids (with `dryRun`, the ids it would delete, deleting
 * nothing). The orchestrator deletes a guest when its `timeoutMs` runs out,
 * but paused time does not count, so a detached guest a host paused and let
 * go of would otherwise never end. A guest that is not detached is never
 * touched: it is its creator's. A guest whose deletion fails does not stop
 * the others; the sweep then rejects, after trying them all.
 */
export async function removeEndedDetachedGuests(
  controlPlane: ControlPlaneClient,
  signal: AbortSignal,
  dryRun = false,
): Promise<string[]> {
  const guests = await controlPlane.listSandboxes(
    { [LABEL.managed]: '1', [LABEL.detached]: '1' },
    signal,
  )
  const now = Date.now()
  const ended = guests.filter((listed) => hasPassedEndTime(listed, now))
  if (dryRun) return ended.map((guest) => guest.sandboxId)
  // One guest the control plane fails to delete does not keep the others.
  return removeEach(
    ended,
    (guest) => guest.sandboxId,
    (guest) => controlPlane.deleteSandbox(guest.sandboxId, signal),
  )
}

/**
 * `cordon gc` for the microVM tier, for a host's own schedule (a timer job,
 * a cron) and for `cordon gc --microvm`: the sweep of
 * {@link removeEndedDetachedGuests} against the configured control plane.
 * Each backend also runs it once, in the background, when it first creates,
 * connects or lists. Nothing else is touched.
 */
export function removeEndedDetachedMicroVMGuests(
  input: MicroVMBackendConfig,
  options: GuestSweepOptions = {},
): Promise<string[]> {
  return runConfiguredSweep(input, options, removeEndedDetachedGuests)
}
