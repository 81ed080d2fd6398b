import type { ContainerBackendConfig } from '@cordon/builtin-backends'
import type { ContainerSandboxLayout, CordonSandboxProvider, SandboxEvent } from '@cordon/core'
import { containerTestBackend, EPHEMERAL_OUTPUTS } from '@cordon/test-support'
import Docker from 'dockerode'
import { createDockerSandboxProvider } from '../src/index.js'

export const docker = new Docker({ socketPath: '/var/run/docker.sock' })

/** A provider on the busybox test image, labelled with the test run. */
export function testProvider(
  backend: Partial<ContainerBackendConfig> = {},
  extra: {
    layout?: ContainerSandboxLayout
    pool?: { size: number }
    defaultMemoryLimitMb?: number
    onEvent?: (event: SandboxEvent) => void
  } = {},
): CordonSandboxProvider {
  return createDockerSandboxProvider({
    backend: containerTestBackend(backend),
    layout: extra.layout ?? EPHEMERAL_OUTPUTS,
    ...(extra.pool ? { pool: extra.pool } : {}),
    ...(extra.defaultMemoryLimitMb ? { defaultMemoryLimitMb: extra.defaultMemoryLimitMb } : {}),
    ...(extra.onEvent ? { onEvent: extra.onEvent } : {}),
  })
}
