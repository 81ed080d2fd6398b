/**
 * Scenario 6: 20 sandboxes requested at once, each exec-ready, against the
 * engine-bound floor (the same 20 bare dockerode sequences at once).
 */
import { performance } from 'node:perf_hooks'
import type { CordonSandbox } from '@cordon/core'
import { cordonProvider } from './cordon.js'
import { interleave } from './interleave.js'
import {
  bareExec,
  createFloorSandbox,
  type FloorSandbox,
  removeFloorSandbox,
} from './peers/dockerode-floor.js'
import type { Scenario } from './scenario.js'
import { formatMs, formatRatio, ratio, summarize } from './stats.js'

const COUNT = 20

export const concurrentCreate: Scenario = async ({ quick, log }) => {
  const provider = cordonProvider()
  const warmup = 1
  const iterations = quick ? 1 : 3
  const readyAt = { cordon: [] as number[], floor: [] as number[] }
  try {
    const arms = [
      {
        name: 'cordon',
        prepare: async () => ({ sandboxes: [] as CordonSandbox[] }),
        run: async (holder: { sandboxes: CordonSandbox[] }) => {
          const started = performance.now()
          const settled = await Promise.allSettled(
            Array.from({ length: COUNT }, async () => {
              const sandbox = await provider.create()
              holder.sandboxes.push(sandbox)
              const result = await sandbox.exec('true')
              if (result.exitCode !== 0) throw new Error(`cordon: true exited ${result.exitCode}`)
              readyAt.cordon.push(performance.now() - started)
            }),
          )
          const failed = settled.find((outcome) => outcome.status === 'rejected')
          if (failed) throw (failed as PromiseRejectedResult).reason
        },
        cleanup: async (holder: { sandboxes: CordonSandbox[] }) => {
          await Promise.all(holder.sandboxes.map((sandbox) => sandbox.destroy()))
        },
      },
      {
        name: 'dockerode floor',
        prepare: async () => ({ sandboxes: [] as FloorSandbox[] }),
        run: async (holder: { sandboxes: FloorSandbox[] }) => {
          const started = performance.now()
          const settled = await Promise.allSettled(
            Array.from({ length: COUNT }, async () => {
              const sandbox = await createFloorSandbox()
              holder.sandboxes.push(sandbox)
              const code = await bareExec(sandbox.container, ['true'])
              if (code !== 0) throw new Error(`floor: true exited ${code}`)
              readyAt.floor.push(performance.now() - started)
            }),
          )
          const failed = settled.find((outcome) => outcome.status === 'rejected')
          if (failed) throw (failed as PromiseRejectedResult).reason
        },
        cleanup: async (holder: { sandboxes: FloorSandbox[] }) => {
          await Promise.all(holder.sandboxes.map((sandbox) => removeFloorSandbox(sandbox)))
        },
      },
    ]
    const samples = await interleave(arms, {
      warmup,
      iterations,
      onRun: (arm, round, ms, isWarmup) => {
        log(`  ${arm} #${round}${isWarmup ? ' (warm-up)' : ''}: ${ms.toFixed(0)} ms`)
      },
    })
    const cordon = summarize(samples.get('cordon')!)
    const floor = summarize(samples.get('dockerode floor')!)
    // Per-sandbox ready times, warm-up round included (they only describe the spread).
    const spread = (values: number[]) => {
      const s = summarize(values)
      return `first ${formatMs(s.min)}, median ${formatMs(s.median)}, last ${formatMs(s.max)}`
    }
    return {
      id: 'concurrent-create',
      title: `6. ${COUNT} sandboxes created concurrently`,
      method: `${warmup} warm-up + ${iterations} measured rounds per arm, A B A B. Timed: from ${COUNT} simultaneous create calls until all ${COUNT} have run \`true\`. Untimed: removing them.`,
      tables: [
        {
          caption: `Total time for ${COUNT} exec-ready sandboxes`,
          arms: [
            {
              name: 'cordon (`provider.create()` × 20 + `exec`)',
              summary: cordon,
              unit: 'ms',
              extra: { 'per-sandbox ready times': spread(readyAt.cordon) },
            },
            {
              name: 'engine-bound floor (bare dockerode × 20)',
              summary: floor,
              unit: 'ms',
              extra: { 'per-sandbox ready times': spread(readyAt.floor) },
            },
          ],
        },
      ],
      comparisons: [
        {
          scenario: `6 ${COUNT} concurrent creates`,
          what: 'cordon / engine-bound floor (total time)',
          ratio: formatRatio(ratio(cordon, floor)),
          target: '(report)',
          met: undefined,
        },
      ],
      notes: [],
      sections: [],
    }
  } finally {
    await provider.close()
  }
}
