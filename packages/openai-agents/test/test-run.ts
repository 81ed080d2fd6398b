import { createDockerSandboxProvider } from '@cordon/backend-docker'
import type { ContainerBackendConfig } from '@cordon/builtin-backends'
import type { CordonSandboxProvider } from '@cordon/core'
import { containerTestBackend } from '@cordon/test-support'

/** A Docker provider whose outputs directory is the SDK's default manifest root. */
export function testProvider(backend: Partial<ContainerBackendConfig> = {}): CordonSandboxProvider {
  return createDockerSandboxProvider({
    backend: containerTestBackend(backend),
    layout: { outputs: { source: { type: 'ephemeral' }, containerPath: '/workspace' } },
  })
}
