import { createDockerSandboxProvider } from '@cordon/backend-docker'
import type { ContainerBackendConfig } from '@cordon/builtin-backends'
import type { CordonSandboxProvider } from '@cordon/core'
import Docker from 'dockerode'

/** Every resource a test run creates carries this label, so the run can prove it leaked nothing. */
export const TEST_RUN_LABEL = 'cordon-test.run'
export const TEST_RUN_ID = process.env.CORDON_TEST_RUN_ID ?? `local-${process.pid}`
/** Built by tooling/engine/setup.sh; no registry is needed. */
export const BUSYBOX_IMAGE = 'cordon-test/busybox:latest'

export const docker = new Docker({ socketPath: '/var/run/docker.sock' })

/** A Docker provider labelled with the test run. */
export function testProvider(backend: Partial<ContainerBackendConfig> = {}): CordonSandboxProvider {
  return createDockerSandboxProvider({
    backend: {
      tier: 'container',
      image: BUSYBOX_IMAGE,
      ...backend,
      labels: { [TEST_RUN_LABEL]: TEST_RUN_ID, ...backend.labels },
    },
    layout: { outputs: { source: { type: 'ephemeral' } } },
  })
}

/** Containers and volumes of this test run that still exist. */
export async function leftovers(): Promise<{
  containers: string[]
  volumes: string[]
  networks: string[]
}> {
  const filters = { label: [`${TEST_RUN_LABEL}=${TEST_RUN_ID}`] }
  const containers = (await docker.listContainers({ all: true, filters })).map(
    (info) => info.Names[0] ?? info.Id,
  )
  const volumes = ((await docker.listVolumes({ filters })).Volumes ?? []).map(
    (volume) => volume.Name,
  )
  const networks = (await docker.listNetworks({ filters })).map((network) => network.Name)
  return { containers, volumes, networks }
}
