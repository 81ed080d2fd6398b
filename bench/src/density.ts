/**
 * Scenario 9: density. Memory the engine charges to an idle sandbox (its
 * memory cgroup: the agent and the init, nothing running), for cordon and
 * for the floor's container whose entry process is `sleep`, and whether
 * cordon's agent runtime is shared by every sandbox or copied per sandbox.
 */
import type { CordonSandbox } from '@cordon/core'
import { cordonProvider } from './cordon.js'
import { docker } from './engine.js'
import {
  createFloorSandbox,
  type FloorSandbox,
  removeFloorSandbox,
} from './peers/dockerode-floor.js'
import type { Scenario } from './scenario.js'
import { summarize } from './stats.js'

const MiB = 1024 * 1024

/** What the container's memory cgroup is charged now: anonymous memory and page cache. */
async function chargedMiB(id: string): Promise<number> {
  const stats = await docker.getContainer(id).stats({ stream: false })
  return stats.memory_stats.usage / MiB
}

export const density: Scenario = async ({ quick, log }) => {
  const count = quick ? 4 : 8
  const provider = cordonProvider()
  const sandboxes: CordonSandbox[] = []
  const floors: FloorSandbox[] = []
  try {
    for (let index = 0; index < count; index++) {
      const sandbox = await provider.create()
      // One command, so the sandbox has done what a fresh one does before it idles.
      await sandbox.exec('true')
      sandboxes.push(sandbox)
      floors.push(await createFloorSandbox())
    }
    // Idle: let start-up garbage be collected and the agent settle.
    await new Promise((resolve) => setTimeout(resolve, quick ? 2000 : 5000))
    const cordon: number[] = []
    const runtimeVolumes = new Set<string>()
    const hugePageNodeVolumes = new Set<string>()
    for (const sandbox of sandboxes) {
      const name = `cordon-${sandbox.id}`
      cordon.push(await chargedMiB(name))
      const info = await docker.getContainer(name).inspect()
      for (const mount of info.Mounts)
        if (mount.Destination === '/.cordon' && mount.Name) runtimeVolumes.add(mount.Name)
        else if (mount.Destination === '/.cordon-node' && mount.Name)
          hugePageNodeVolumes.add(mount.Name)
    }
    const floor: number[] = []
    for (const sandbox of floors) floor.push(await chargedMiB(sandbox.container.id))
    log(`  cordon: ${cordon.map((value) => value.toFixed(1)).join(' ')} MiB`)
    log(`  floor: ${floor.map((value) => value.toFixed(1)).join(' ')} MiB`)
    const { Volumes } = await docker.df()
    const runtimeSize = (Volumes ?? [])
      .filter((volume: { Name: string }) => runtimeVolumes.has(volume.Name))
      .map((volume: { UsageData?: { Size?: number } }) => (volume.UsageData?.Size ?? 0) / MiB)
    const cordonSummary = summarize(cordon)
    return {
      id: 'density',
      title: '9. Density: memory charged to an idle sandbox',
      method: `${count} sandboxes of each kind, created one after the other, each after one \`true\` (cordon) and then left idle for ${quick ? 2 : 5} s; then each container's memory cgroup usage (\`memory_stats.usage\`: anonymous memory plus the page cache it was charged for).`,
      tables: [
        {
          caption: 'Memory charged to one idle sandbox',
          arms: [
            {
              name: 'cordon (agent under the engine init)',
              summary: cordonSummary,
              unit: 'MiB',
            },
            {
              name: 'floor (`sleep` under the engine init)',
              summary: summarize(floor),
              unit: 'MiB',
            },
          ],
        },
      ],
      comparisons: [
        {
          scenario: '9 density',
          what: 'memory charged to an idle cordon sandbox (median)',
          ratio: `${cordonSummary.median.toFixed(1)} MiB`,
          target: '≤ 16 MiB',
          met: cordonSummary.median <= 16,
        },
        {
          scenario: '9 density',
          what: `agent runtime volumes mounted by ${count} sandboxes (one shared copy)`,
          ratio: `${runtimeVolumes.size} (${runtimeSize.map((size: number) => `${size.toFixed(0)} MiB`).join(', ')} on disk)`,
          target: '1',
          met: runtimeVolumes.size === 1,
        },
        {
          scenario: '9 density',
          what: `huge-page Node volumes mounted by ${count} sandboxes (one shared copy, in memory)`,
          ratio: String(hugePageNodeVolumes.size),
          target: '1',
          met: hugePageNodeVolumes.size === 1,
        },
      ],
      notes: [
        'The runtime volume is read-only and mounted by every sandbox: its files are in the page cache once. Their pages are charged to the cgroup of the sandbox that first read them (usually the first sandbox after the volume was filled), which is why the maximum is above the median.',
        "The agent's Node binary is mapped from the huge-page volume (a tmpfs, about 96 MiB held in memory once per engine): its pages were charged when the engine wrote them there, not to any sandbox.",
      ],
      sections: [],
    }
  } finally {
    await provider.close()
    for (const floor of floors) await removeFloorSandbox(floor)
  }
}
