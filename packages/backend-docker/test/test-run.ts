import type { ContainerBackendConfig } from '@cordon/builtin-backends'
import type { ContainerSandboxLayout, CordonSandboxProvider } from '@cordon/core'
import Docker from 'dockerode'
import { createDockerSandboxProvider } from '../src/index.js'
import { BUSYBOX_IMAGE } from './test-images.js'

/** Every resource a test run creates carries this label, so the run can prove it leaked nothing. */
export const TEST_RUN_LABEL = 'cordon-test.run'
export const TEST_RUN_ID = process.env.CORDON_TEST_RUN_ID ?? `local-${process.pid}`

export const docker = new Docker({ socketPath: '/var/run/docker.sock' })

export function testProvider(
  backend: Partial<ContainerBackendConfig> = {},
  extra: {
    layout?: ContainerSandboxLayout
    pool?: { size: number }
    defaultMemoryLimitMb?: number
  } = {},
): CordonSandboxProvider {
  return createDockerSandboxProvider({
    backend: {
      tier: 'container',
      image: BUSYBOX_IMAGE,
      ...backend,
      labels: { [TEST_RUN_LABEL]: TEST_RUN_ID, ...backend.labels },
    },
    layout: extra.layout ?? { outputs: { source: { type: 'ephemeral' } } },
    ...(extra.pool ? { pool: extra.pool } : {}),
    ...(extra.defaultMemoryLimitMb ? { defaultMemoryLimitMb: extra.defaultMemoryLimitMb } : {}),
  })
}

/** Containers, volumes, networks and images of this test run that still exist. */
export async function leftovers(): Promise<{
  containers: string[]
  volumes: string[]
  networks: string[]
  images: string[]
}> {
  const filters = { label: [`${TEST_RUN_LABEL}=${TEST_RUN_ID}`] }
  const containers = (await docker.listContainers({ all: true, filters })).map(
    (info) => info.Names[0] ?? info.Id,
  )
  const volumes = ((await docker.listVolumes({ filters })).Volumes ?? []).map(
    (volume) => volume.Name,
  )
  const networks = (await docker.listNetworks({ filters })).map((network) => network.Name)
  // Images a test builds carry the label, and so do those pulled from what a test pushed.
  const images = (await docker.listImages({ filters })).map(
    (image) => image.RepoTags?.[0] ?? image.Id,
  )
  return { containers, volumes, networks, images }
}
