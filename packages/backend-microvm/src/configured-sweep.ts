import type { MicroVMBackendConfig } from '@cordon/builtin-backends'
import { parseBackendConfig } from '@cordon/core/backend'
import { type ControlPlaneClient, controlPlaneFor } from './control-plane-client.js'
import { microVMBackend } from './definition.js'

/** How long a sweep of guests may take when the caller gives no signal. */
export const SWEEP_TIMEOUT_MS = 60_000

/** What `cordon gc --microvm` and a host's own schedule pass a sweep. */
export interface GuestSweepOptions {
  readonly signal?: AbortSignal
  /** Name what would go, and delete nothing. */
  readonly dryRun?: boolean
}

/**
 * Runs one sweep of guests against the control plane `input` names (the
 * backend's config, checked by its schema), and closes its client after.
 */
export async function runConfiguredSweep(
  input: MicroVMBackendConfig,
  options: GuestSweepOptions,
  sweep: (
    controlPlane: ControlPlaneClient,
    signal: AbortSignal,
    dryRun: boolean,
  ) => Promise<string[]>,
): Promise<string[]> {
  const controlPlane = controlPlaneFor(parseBackendConfig(microVMBackend, input))
  try {
    return await sweep(
      controlPlane,
      options.signal ?? AbortSignal.timeout(SWEEP_TIMEOUT_MS),
      options.dryRun === true,
    )
  } finally {
    await controlPlane.close()
  }
}
