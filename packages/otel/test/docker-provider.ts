import type { CordonSandboxProvider, SandboxEventListener } from '@cordon/core'
import { createSandboxProvider } from '@cordon/sandbox'
import { containerTestBackend, EPHEMERAL_OUTPUTS } from '@cordon/test-support'

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
    backend: containerTestBackend(backend),
    layout: EPHEMERAL_OUTPUTS,
    allowInwardFor,
    ...(pool ? { pool } : {}),
    onEvent,
  })
}
