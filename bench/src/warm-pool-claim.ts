/**
 * Scenario 2: claiming a sandbox from a warm pool and running the first
 * command, against one bare exec round trip (the least any "first command"
 * can cost on this engine), under runc or gVisor.
 */
import type { CordonSandbox } from '@cordon/core'
import { type BenchRuntime, RUNC } from './bench-runtime.js'
import { cordonProvider } from './cordon.js'
import { traceEngineCalls } from './engine-trace.js'
import { type Holder, interleave } from './interleave.js'
import { bareExec, createFloorSandbox, removeFloorSandbox } from './peers/dockerode-floor.js'
import { engineCallTable } from './profile-table.js'
import type { Scenario } from './scenario.js'
import { formatRatio, ratio, summarize } from './stats.js'

export function warmPoolClaimScenario(variant: BenchRuntime): Scenario {
  return async ({ quick, log }) => {
    const runtime = variant.engineRuntime
    const provider = cordonProvider({ poolSize: 1, runtime })
    const warmup = quick ? 2 : 3
    const iterations = quick ? 5 : 15
    const floor = await createFloorSandbox(undefined, { runtime })
    try {
      await provider.warm()
      const arms = [
        {
          name: 'cordon claim',
          // The pool refills in the background after each claim; wait for it
          // here, untimed, so every claim (and the next arm) starts quiet.
          prepare: async (): Promise<Holder<CordonSandbox>> => {
            await provider.warm()
            return {}
          },
          run: async (holder: Holder<CordonSandbox>) => {
            holder.value = await provider.create()
            const result = await holder.value.exec('true')
            if (result.exitCode !== 0) throw new Error(`cordon: true exited ${result.exitCode}`)
          },
          cleanup: async (holder: Holder<CordonSandbox>) => {
            await holder.value?.destroy()
            await provider.warm()
          },
        },
        {
          name: 'bare exec',
          run: async () => {
            const code = await bareExec(floor.container, ['true'])
            if (code !== 0) throw new Error(`bare exec exited ${code}`)
          },
        },
      ]
      const samples = await interleave(arms, {
        warmup,
        iterations,
        onRun: (arm, round, ms, isWarmup) =>
          log(`  ${arm} #${round}${isWarmup ? ' (warm-up)' : ''}: ${ms.toFixed(2)} ms`),
      })
      const claim = summarize(samples.get('cordon claim')!)
      const bare = summarize(samples.get('bare exec')!)
      await provider.warm()
      let claimed: CordonSandbox | undefined
      const trace = await traceEngineCalls(async () => {
        claimed = await provider.create()
        await claimed.exec('true')
      })
      await claimed?.destroy()
      return {
        id: `warm-pool-claim${variant.idSuffix}`,
        title: `2. Warm-pool claim to first exec${variant.label}`,
        method: `Provider with \`pool: { size: 1 }\`${runtime ? ` and \`runtime: '${runtime}'\`` : ''}, filled with \`warm()\`. ${warmup} warm-up + ${iterations} measured rounds per arm, A B A B. Timed: \`provider.create()\` (a claim) + \`exec('true')\`; untimed: destroying the claimed sandbox and waiting for the pool to refill. The comparison is one bare dockerode exec round trip on a running hardened container${runtime ? ' of the same runtime' : ''}.`,
        tables: [
          {
            caption: `Claim to first exec${variant.label}`,
            arms: [
              { name: 'cordon (claim + `exec`)', summary: claim, unit: 'ms' },
              { name: 'bare dockerode exec round trip', summary: bare, unit: 'ms' },
            ],
          },
        ],
        comparisons: [
          {
            scenario: `2 warm-pool claim${variant.label}`,
            what: 'cordon claim + exec / bare exec',
            ratio: formatRatio(ratio(claim, bare)),
            target: '≤ 1.30x',
            met: ratio(claim, bare) <= 1.3,
          },
        ],
        notes: [
          "The pool refills in the background after a claim; where the refill's engine calls overlap the timed exec (see the profile), that is part of what a host sees.",
        ],
        sections: [
          "#### Profile: engine calls of one claim + exec (the refill's calls included)",
          engineCallTable('cordon claim', trace),
        ],
      }
    } finally {
      await provider.close()
      await removeFloorSandbox(floor)
    }
  }
}

/** Scenario 2 under the engine's default runtime (runc). */
export const warmPoolClaim: Scenario = warmPoolClaimScenario(RUNC)
