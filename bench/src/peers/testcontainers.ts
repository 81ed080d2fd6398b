/**
 * testcontainers-node with the same hardened container. Its builder has no
 * setter for a read-only root filesystem, pids and swap limits, init or
 * `Mounts`, so a subclass fills its (protected) host config directly, the way
 * a testcontainers user who needs them would.
 *
 * The reaper (Ryuk) starts from a registry image that cannot be pulled here,
 * so it is disabled (`TESTCONTAINERS_RYUK_DISABLED=true`) before testcontainers
 * is loaded, and the bench removes its containers itself. The pull policy is
 * the default one, which never pulls an image that exists locally.
 */
import type { StartedTestContainer } from 'testcontainers'
import type { EngineRuntime } from '../bench-runtime.js'
import { BENCH_IMAGE, BENCH_LABELS, uniqueName } from '../engine.js'
import { hardenedCreateOptions, inlineVolumeMount } from '../hardened-spec.js'

process.env.TESTCONTAINERS_RYUK_DISABLED = 'true'
const testcontainers = await import('testcontainers')

class HardenedContainer extends testcontainers.GenericContainer {
  constructor(name: string, runtime: EngineRuntime | undefined) {
    super(BENCH_IMAGE)
    const spec = hardenedCreateOptions(name, [inlineVolumeMount(`${name}-outputs`)], runtime)
    this.withName(name)
      .withLabels(BENCH_LABELS)
      .withEntrypoint(spec.Entrypoint as string[])
      .withCommand([])
      .withUser(spec.User!)
      .withWorkingDir(spec.WorkingDir!)
      .withNetworkMode('none')
      .withPullPolicy(testcontainers.PullPolicy.defaultPolicy())
    this.hostConfig = { ...this.hostConfig, ...spec.HostConfig }
    this.createOpts = { ...this.createOpts, NetworkDisabled: true, StopTimeout: 1 }
  }
}

export type { StartedTestContainer }

export async function startTestcontainer(runtime?: EngineRuntime): Promise<StartedTestContainer> {
  return new HardenedContainer(uniqueName('tc'), runtime).start()
}
