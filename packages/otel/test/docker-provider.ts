import type { CordonSandboxProvider, SandboxEventListener } from '@cordon/core'
import { createSandboxProvider } from '@cordon/sandbox'

/** Built by tooling/engine/setup.sh; no registry is needed. */
export const BUSYBOX_IMAGE = 'cordon-test/busybox:latest'
/** Every sandbox a test run creates carries this label, so the run can prove it leaked nothing. */
export const TEST_RUN_LABEL = 'cordon-test.run'

/** A real Docker-backed provider, as a host makes one, reporting its events to `onEvent`. */
export function dockerProvider(
  onEvent: SandboxEventListener,
  backend: {
    runtime?: 'docker' | 'runsc'
    gatewayHosts?: Record<string, string>
    gatewayAllowedPorts?: number[]
  } = {},
  allowInwardFor: string[] = [],
  pool?: { size: number },
): CordonSandboxProvider {
  return createSandboxProvider({
    backend: {
      tier: 'container',
      image: BUSYBOX_IMAGE,
      labels: { [TEST_RUN_LABEL]: process.env.CORDON_TEST_RUN_ID ?? `local-${process.pid}` },
      ...backend,
    },
    layout: { outputs: { source: { type: 'ephemeral' } } },
    allowInwardFor,
    ...(pool ? { pool } : {}),
    onEvent,
  })
}
