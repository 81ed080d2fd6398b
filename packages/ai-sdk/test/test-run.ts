import { createDockerSandboxProvider } from '@cordon/backend-docker'
import type { ContainerBackendConfig } from '@cordon/builtin-backends'
import type { CordonSandboxProvider } from '@cordon/core'
import { containerTestBackend, EPHEMERAL_OUTPUTS } from '@cordon/test-support'

/** A Docker provider labelled with the test run. */
export function testProvider(backend: Partial<ContainerBackendConfig> = {}): CordonSandboxProvider {
  return createDockerSandboxProvider({
    backend: containerTestBackend(backend),
    layout: EPHEMERAL_OUTPUTS,
  })
}
