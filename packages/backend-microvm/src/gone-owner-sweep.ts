import type { MicroVMBackendConfig } from '@cordon/builtin-backends'
import { judgeOwner, LABEL, ownerLabels, removeEach } from '@cordon/core/backend'
import { type GuestSweepOptions, runConfiguredSweep } from './configured-sweep.js'
import type { ControlPlaneClient } from './control-plane-client.js'

/**
 * Deletes every guest of cordon's on the control plane that is not detached
 * and whose creating host process has ended, and resolves with their sandbox
 * ids (with `dryRun`, the ids it would delete, deleting nothing).
 *
 * Why: a sandbox that is not detached ends with its host, through its agent
 * (the host holds it, `hold-host`, and an agent no host has held for the
 * grace exits, and the orchestrator deletes its guest). A paused guest's
 * agent is frozen and cannot exit, and the orchestrator does not count
 * paused time toward its `timeoutMs`: a host that died while its sandbox was
 * paused left the guest paused for good.
 *
 * Every guest carries its creator's owner labels (core's `ownerLabels`: the
 * machine's boot, the PID and time namespaces, the pid and its start time).
 * The owner is judged as the Docker backend judges a container's
 * (`judgeOwner`): only a process this sweep can place, on the same boot of
 * the same machine and in the same namespaces, and whose pid no longer
 * belongs to the process that created the guest, is gone. A guest whose
 * owner is alive, or cannot be placed from here (another machine, another
 * container, labels without a scope, a guest made before its labels were),
 * is kept. A detached guest is never touched: its end time decides
 * (detached-sweep.ts). A guest whose deletion fails does not stop the
 * others; the sweep then rejects, after trying them all.
 */
export async function removeGuestsOfGoneOwners(
  controlPlane: ControlPlaneClient,
  signal: AbortSignal,
  dryRun = false,
): Promise<string[]> {
  // Only a guest made on this boot of this machine can be judged here: asked
  // for by the boot id its owner labels record (as this process's own would).
  const boot = ownerLabels('gone-owner-sweep')[LABEL.ownerBoot]
  if (boot === undefined || boot === 'unknown') return []
  const guests = await controlPlane.listSandboxes(
    { [LABEL.managed]: '1', [LABEL.ownerBoot]: boot },
    signal,
  )
  const orphaned = guests.filter(ownerIsGone)
  if (dryRun) return orphaned.map((guest) => guest.sandboxId)
  return removeEach(
    orphaned,
    (guest) => guest.sandboxId,
    (guest) => controlPlane.deleteSandbox(guest.sandboxId, signal),
  )
}

/** A guest, not detached, whose creating process this machine can tell has ended. */
function ownerIsGone(guest: { readonly labels: Readonly<Record<string, string>> }): boolean {
  return guest.labels[LABEL.detached] !== '1' && judgeOwner(guest.labels).state === 'gone'
}

/**
 * `cordon gc` for the microVM tier's guests whose host died (for a host's
 * own schedule and for `cordon gc --microvm`, run on the machine the hosts
 * ran on): the sweep of {@link removeGuestsOfGoneOwners} against the
 * configured control plane. Each backend also runs it once, in the
 * background, when it first creates, connects or lists.
 */
export function removeMicroVMGuestsOfGoneHosts(
  input: MicroVMBackendConfig,
  options: GuestSweepOptions = {},
): Promise<string[]> {
  return runConfiguredSweep(input, options, removeGuestsOfGoneOwners)
}
