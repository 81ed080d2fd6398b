/**
 * Scenario 8: 200 execs in a row on one sandbox, and what they leave in the
 * host process: heap (after a full collection), resident memory, open
 * handles and file descriptors, before and after. The same for bare
 * dockerode execs, side by side.
 */
import { readdirSync } from 'node:fs'
import { setFlagsFromString } from 'node:v8'
import { runInNewContext } from 'node:vm'
import { cordonProvider } from './cordon.js'
import { bareExec, createFloorSandbox, removeFloorSandbox } from './peers/dockerode-floor.js'
import type { Scenario } from './scenario.js'
import { summarize } from './stats.js'

const MiB = 1024 * 1024

setFlagsFromString('--expose-gc')
const collect = runInNewContext('gc') as () => void

interface Footprint {
  readonly heapMiB: number
  readonly rssMiB: number
  readonly handles: number
  readonly fds: number
}

async function footprint(): Promise<Footprint> {
  // Let closed sockets finish closing, then collect twice (weak callbacks run between).
  await new Promise((resolve) => setTimeout(resolve, 200))
  collect()
  collect()
  const usage = process.memoryUsage()
  return {
    heapMiB: (usage.heapUsed + usage.external) / MiB,
    rssMiB: usage.rss / MiB,
    handles: process.getActiveResourcesInfo().length,
    fds: readdirSync('/proc/self/fd').length,
  }
}

export const execSoak: Scenario = async ({ quick, log }) => {
  const count = quick ? 100 : 200
  const provider = cordonProvider()
  const sandbox = await provider.create()
  const floor = await createFloorSandbox()
  try {
    const runs = {
      cordon: async () => {
        const result = await sandbox.exec('true')
        if (result.exitCode !== 0) throw new Error(`cordon: true exited ${result.exitCode}`)
      },
      dockerode: async () => {
        const code = await bareExec(floor.container, ['true'])
        if (code !== 0) throw new Error(`dockerode: true exited ${code}`)
      },
    }
    const rows: Array<{ name: string; before: Footprint; after: Footprint; times: number[] }> = []
    for (const [name, run] of Object.entries(runs)) {
      // Ten untimed calls first: connections, spares and JIT reach their steady state.
      for (let index = 0; index < 10; index++) await run()
      const before = await footprint()
      const times: number[] = []
      for (let index = 0; index < count; index++) {
        const started = performance.now()
        await run()
        times.push(performance.now() - started)
      }
      const after = await footprint()
      log(
        `  ${name}: heap ${before.heapMiB.toFixed(1)} -> ${after.heapMiB.toFixed(1)} MiB, handles ${before.handles} -> ${after.handles}, fds ${before.fds} -> ${after.fds}`,
      )
      rows.push({ name, before, after, times })
    }
    const cordon = rows.find((row) => row.name === 'cordon')!
    const heapGrowth = cordon.after.heapMiB - cordon.before.heapMiB
    const handleGrowth = cordon.after.handles - cordon.before.handles
    const fdGrowth = cordon.after.fds - cordon.before.fds
    const growth = (row: (typeof rows)[number]) =>
      `heap ${(row.after.heapMiB - row.before.heapMiB).toFixed(2)} MiB, RSS ${(row.after.rssMiB - row.before.rssMiB).toFixed(1)} MiB, handles ${row.after.handles - row.before.handles}, fds ${row.after.fds - row.before.fds}`
    return {
      id: 'exec-soak',
      title: `8. ${count} execs in a row: what stays behind in the host`,
      method: `One running sandbox per arm; 10 untimed calls, then ${count} \`true\` execs back to back. Before and after: heap + external after two full collections, RSS, active handles (\`process.getActiveResourcesInfo()\`) and open descriptors (\`/proc/self/fd\`).`,
      tables: [
        {
          caption: `${count} execs in a row (per-exec time)`,
          arms: rows.map((row) => ({
            name: row.name === 'cordon' ? 'cordon (`sandbox.exec`)' : 'bare dockerode exec',
            summary: summarize(row.times),
            unit: 'ms',
            extra: { 'growth over the run': growth(row) },
          })),
        },
      ],
      comparisons: [
        {
          scenario: '8 execs in a row',
          what: `cordon heap growth over ${count} execs (after collection)`,
          ratio: `${heapGrowth.toFixed(2)} MiB`,
          target: '< 1 MiB',
          met: heapGrowth < 1,
        },
        {
          scenario: '8 execs in a row',
          what: `cordon open handles and descriptors added over ${count} execs`,
          ratio: `${handleGrowth} handles, ${fdGrowth} fds`,
          target: '0',
          met: handleGrowth <= 0 && fdGrowth <= 0,
        },
      ],
      notes: [],
      sections: [],
    }
  } finally {
    await provider.close()
    await removeFloorSandbox(floor)
  }
}
