/**
 * Scenario 11: how long the agent program takes to start, as the CommonJS
 * build (what the Docker backend runs) and as the ES module build, next to
 * Node starting with nothing to run. A container's create waits for it.
 * And Node itself started from the two copies the Docker backend has on
 * the engine: the runtime volume's (an ordinary file) and the huge-page
 * one the agent starts from (a tmpfs with huge=always; see the Docker
 * README, "The agent's Node on huge pages").
 */
import { spawnSync } from 'node:child_process'
import { accessSync, constants } from 'node:fs'
import { agentProgramPath } from '@cordon/agent'
import { prepareAgentRuntime } from '@cordon/backend-docker'
import { BENCH_IMAGE, docker } from './engine.js'
import { interleave } from './interleave.js'
import type { Scenario } from './scenario.js'
import { formatRatio, ratio, summarize } from './stats.js'

/** Runs one start to its end; an empty environment, as a container's entry gets. */
function startOnce(args: string[], node = process.execPath): void {
  const run = spawnSync(node, args, { env: {}, stdio: 'ignore' })
  if (run.status !== 0) throw new Error(`${node} ${args.join(' ')} exited ${run.status}`)
}

/** The engine's two copies of Node, where this host can reach the engine's volumes (a local engine, as root). */
async function engineNodeCopies(): Promise<{ runtime: string; hugePages: string } | undefined> {
  const prepared = await prepareAgentRuntime({ image: BENCH_IMAGE })
  if (!prepared.hugePageNodeVolume) return undefined
  const runtime = `${(await docker.getVolume(prepared.volume).inspect()).Mountpoint}/bin/node`
  const hugePages = `${(await docker.getVolume(prepared.hugePageNodeVolume).inspect()).Mountpoint}/node`
  try {
    for (const path of [runtime, hugePages]) accessSync(path, constants.X_OK)
  } catch {
    return undefined
  }
  return { runtime, hugePages }
}

export const agentStart: Scenario = async ({ quick, log }) => {
  const warmup = quick ? 2 : 5
  const iterations = quick ? 8 : 30
  const cjs = agentProgramPath('cjs')
  const esm = agentProgramPath()
  const copies = await engineNodeCopies()
  const samples = await interleave(
    [
      { name: 'node', run: async () => startOnce(['-e', '0']) },
      { name: 'cjs', run: async () => startOnce([cjs, '--version']) },
      { name: 'esm', run: async () => startOnce([esm, '--version']) },
      ...(copies
        ? [
            {
              name: 'runtime node',
              run: async () => startOnce([cjs, '--version'], copies.runtime),
            },
            {
              name: 'huge-page node',
              run: async () => startOnce([cjs, '--version'], copies.hugePages),
            },
          ]
        : []),
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
  const fromRuntime = copies ? summarize(samples.get('runtime node')!) : undefined
  const fromHugePages = copies ? summarize(samples.get('huge-page node')!) : undefined
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
          ...(fromRuntime && fromHugePages
            ? [
                {
                  name: "the same CommonJS start, the runtime volume's Node",
                  summary: fromRuntime,
                  unit: 'ms' as const,
                },
                {
                  name: 'the same CommonJS start, the huge-page Node',
                  summary: fromHugePages,
                  unit: 'ms' as const,
                },
              ]
            : []),
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
        what: "huge-page Node / the runtime volume's Node",
        ratio:
          fromRuntime && fromHugePages ? formatRatio(ratio(fromHugePages, fromRuntime)) : 'n/a',
        target: '< 1.00x',
        met: fromRuntime && fromHugePages ? ratio(fromHugePages, fromRuntime) < 1 : false,
      },
      {
        scenario: '11 agent start-up',
        what: 'CommonJS build / Node alone',
        ratio: formatRatio(ratio(commonjs, node)),
        target: '(report)',
        met: undefined,
      },
    ],
    notes: [
      copies
        ? "The two copies of Node are the engine's own files (the volumes' mount points on this host), started on the host: the comparison isolates how the binary is mapped."
        : 'The engine holds no huge-page copy of Node, or its volumes are not reachable from this host: that comparison was not made, and counts as missed.',
    ],
    sections: [],
  }
}
