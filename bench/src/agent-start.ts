/**
 * Scenario 11: how long the agent program takes to start, as the CommonJS
 * build (what the Docker backend runs) and as the ES module build, next to
 * Node starting with nothing to run. A container's create waits for it.
 */
import { spawnSync } from 'node:child_process'
import { agentProgramPath } from '@cordon/agent'
import { interleave } from './interleave.js'
import type { Scenario } from './scenario.js'
import { formatRatio, ratio, summarize } from './stats.js'

/** Runs one start to its end; an empty environment, as a container's entry gets. */
function startOnce(args: string[]): void {
  const run = spawnSync(process.execPath, args, { env: {}, stdio: 'ignore' })
  if (run.status !== 0) throw new Error(`node ${args.join(' ')} exited ${run.status}`)
}

export const agentStart: Scenario = async ({ quick, log }) => {
  const warmup = quick ? 2 : 5
  const iterations = quick ? 8 : 30
  const cjs = agentProgramPath('cjs')
  const esm = agentProgramPath()
  const samples = await interleave(
    [
      { name: 'node', run: async () => startOnce(['-e', '0']) },
      { name: 'cjs', run: async () => startOnce([cjs, '--version']) },
      { name: 'esm', run: async () => startOnce([esm, '--version']) },
    ],
    {
      warmup,
      iterations,
      onRun: (arm, round, ms, isWarmup) =>
        log(`  ${arm} #${round}${isWarmup ? ' (warm-up)' : ''}: ${ms.toFixed(2)} ms`),
    },
  )
  const node = summarize(samples.get('node')!)
  const commonjs = summarize(samples.get('cjs')!)
  const module = summarize(samples.get('esm')!)
  return {
    id: 'agent-start',
    title: '11. Agent start-up: the CommonJS build against the ES module build',
    method: `${warmup} warm-up + ${iterations} measured rounds per arm, round-robin, on the host with an empty environment (as a container's entry process gets). Timed: \`node <program> --version\` from spawn to exit, which loads the whole program and the parts of Node's standard library it imports.`,
    tables: [
      {
        caption: 'Start to exit',
        arms: [
          { name: '`node -e 0` (Node alone)', summary: node, unit: 'ms' },
          { name: '`node cordon-agent.cjs --version`', summary: commonjs, unit: 'ms' },
          { name: '`node cordon-agent.mjs --version`', summary: module, unit: 'ms' },
        ],
      },
    ],
    comparisons: [
      {
        scenario: '11 agent start-up',
        what: 'CommonJS build / ES module build',
        ratio: formatRatio(ratio(commonjs, module)),
        target: '< 1.00x',
        met: ratio(commonjs, module) < 1,
      },
      {
        scenario: '11 agent start-up',
        what: 'CommonJS build / Node alone',
        ratio: formatRatio(ratio(commonjs, node)),
        target: '(report)',
        met: undefined,
      },
    ],
    notes: [],
    sections: [],
  }
}
