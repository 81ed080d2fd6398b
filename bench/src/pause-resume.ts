/**
 * Scenario 12: pause and resume latency of a running sandbox, under runc and
 * gVisor, against the engine's own freezer called bare through dockerode
 * (`docker pause` / `docker unpause`) on a hardened container of the same
 * runtime. cordon's pause adds one agent round trip before the freeze (the
 * agent holds its deadlines) and its resume one after the thaw.
 */
import type { CordonSandbox } from '@cordon/core'
import { cordonProvider } from './cordon.js'
import { interleave } from './interleave.js'
import {
  createFloorSandbox,
  type FloorSandbox,
  removeFloorSandbox,
} from './peers/dockerode-floor.js'
import type { ArmResult, Comparison, Scenario } from './scenario.js'
import { formatRatio, ratio, summarize } from './stats.js'

const RUNTIMES = ['runc', 'runsc'] as const

export const pauseResume: Scenario = async ({ quick, log }) => {
  const warmup = quick ? 1 : 3
  const iterations = quick ? 5 : 20
  const tables: Array<{ caption: string; arms: ArmResult[] }> = []
  const comparisons: Comparison[] = []
  for (const runtime of RUNTIMES) {
    const provider = cordonProvider({ runtime })
    let sandbox: CordonSandbox | undefined
    let floor: FloorSandbox | undefined
    try {
      sandbox = await provider.create()
      floor = await createFloorSandbox(undefined, { runtime })
      const cordon = sandbox
      const bare = floor.container
      const samples = await interleave(
        [
          {
            name: 'cordon pause',
            run: () => cordon.pause(),
            cleanup: () => cordon.resume(),
          },
          {
            name: 'cordon resume',
            prepare: () => cordon.pause(),
            run: () => cordon.resume(),
          },
          {
            name: 'bare pause',
            run: async () => {
              await bare.pause()
            },
            cleanup: async () => {
              await bare.unpause()
            },
          },
          {
            name: 'bare unpause',
            prepare: async () => {
              await bare.pause()
            },
            run: async () => {
              await bare.unpause()
            },
          },
        ],
        {
          warmup,
          iterations,
          onRun: (arm, round, ms, isWarmup) =>
            log(
              `  ${runtime} ${arm} #${round}${isWarmup ? ' (warm-up)' : ''}: ${ms.toFixed(2)} ms`,
            ),
        },
      )
      const s = (name: string) => summarize(samples.get(name)!)
      const [pause, resume, barePause, bareUnpause] = [
        s('cordon pause'),
        s('cordon resume'),
        s('bare pause'),
        s('bare unpause'),
      ]
      // Still whole: a command runs after every pause and resume above.
      const check = await cordon.exec('true')
      if (check.exitCode !== 0)
        throw new Error(`cordon: true exited ${check.exitCode} after the rounds`)
      tables.push({
        caption: `Pause and resume (${runtime})`,
        arms: [
          { name: 'cordon `sandbox.pause()`', summary: pause, unit: 'ms' },
          { name: 'dockerode `container.pause()`', summary: barePause, unit: 'ms' },
          { name: 'cordon `sandbox.resume()`', summary: resume, unit: 'ms' },
          { name: 'dockerode `container.unpause()`', summary: bareUnpause, unit: 'ms' },
        ],
      })
      comparisons.push(
        {
          scenario: '12 pause and resume',
          what: `cordon pause / bare dockerode pause (${runtime})`,
          ratio: formatRatio(ratio(pause, barePause)),
          target: '(report)',
          met: undefined,
        },
        {
          scenario: '12 pause and resume',
          what: `cordon resume / bare dockerode unpause (${runtime})`,
          ratio: formatRatio(ratio(resume, bareUnpause)),
          target: '(report)',
          met: undefined,
        },
      )
    } finally {
      await sandbox?.destroy()
      await provider.close()
      if (floor) {
        await floor.container.unpause().catch(() => {})
        await removeFloorSandbox(floor)
      }
    }
  }
  return {
    id: 'pause-resume',
    title: '12. Pause and resume',
    method: `Per runtime (runc, then gVisor): one cordon sandbox and one bare hardened container of that runtime, both idle and running. ${warmup} warm-up + ${iterations} measured rounds per arm, round-robin. Timed: \`sandbox.pause()\` and \`sandbox.resume()\` (each untimed-undone by the other), against dockerode's \`container.pause()\` and \`container.unpause()\`, the engine's freezer with nothing on top.`,
    tables,
    comparisons,
    notes: [
      "cordon's pause asks the agent to hold its deadlines before the freeze, and its resume lets them go after the thaw: one agent round trip each on top of the engine's call.",
    ],
    sections: [],
  }
}
