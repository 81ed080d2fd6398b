import Dockerode from 'dockerode'
import { startTestRun, TEST_RUN_LABEL, testRunId } from './test-run.js'

/** What is left on the engine of one test run, by kind (container and image names, volume and network names). */
export interface EngineLeftovers {
  readonly containers: string[]
  readonly volumes: string[]
  readonly networks: string[]
  readonly images: string[]
}

/** Containers, volumes, networks and images labelled with the run that still exist. */
export async function engineLeftovers(
  options: { runId?: string; docker?: Dockerode } = {},
): Promise<EngineLeftovers> {
  const docker = options.docker ?? new Dockerode()
  const filters = { label: [`${TEST_RUN_LABEL}=${options.runId ?? testRunId()}`] }
  const [containers, volumes, networks, images] = await Promise.all([
    docker.listContainers({ all: true, filters }),
    docker.listVolumes({ filters }),
    docker.listNetworks({ filters }),
    // Images a test builds carry the label, and so do those pulled from what a test pushed.
    docker.listImages({ filters }),
  ])
  return {
    containers: containers.map((info) => info.Names[0] ?? info.Id),
    volumes: (volumes.Volumes ?? []).map((volume) => volume.Name),
    networks: networks.map((network) => network.Name),
    images: images.map((image) => image.RepoTags?.[0] ?? image.Id),
  }
}

function countOf(found: EngineLeftovers): number {
  return (
    found.containers.length + found.volumes.length + found.networks.length + found.images.length
  )
}

/**
 * Fails when anything labelled with the run is still on the engine after
 * `graceMs` (default 12 s: a removal after a failed create is swept again up
 * to eight seconds later, and one the engine accepted may still be running).
 */
export async function assertNoEngineLeftovers(
  options: { runId?: string; graceMs?: number; docker?: Dockerode } = {},
): Promise<void> {
  const until = Date.now() + (options.graceMs ?? 12_000)
  let found = await engineLeftovers(options)
  while (countOf(found) > 0 && Date.now() < until) {
    await new Promise((resolve) => setTimeout(resolve, 500))
    found = await engineLeftovers(options)
  }
  if (countOf(found) > 0) {
    throw new Error(`test run leaked ${countOf(found)} engine resources: ${JSON.stringify(found)}`)
  }
}

/**
 * A vitest global setup: names the run, and when the run ends fails it if any
 * container, volume, network or image labelled with it is left. A package's
 * `test/global-setup.ts` is `export default leakCheckedTestRun`.
 */
export async function leakCheckedTestRun(): Promise<() => Promise<void>> {
  const runId = startTestRun()
  return () => assertNoEngineLeftovers({ runId })
}
