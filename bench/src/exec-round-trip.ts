/**
 * Scenario 3: one exec round trip (`true`, exit code read back) on a sandbox
 * that is already running, for cordon, bare dockerode, testcontainers' `exec`
 * and `docker exec`; under gVisor, cordon, bare dockerode and `docker exec`.
 */
import { type BenchRuntime, RUNC } from './bench-runtime.js'
import { cordonProvider } from './cordon.js'
import { removeContainer, removeVolume } from './engine.js'
import { traceEngineCalls } from './engine-trace.js'
import { interleave } from './interleave.js'
import { cliExec } from './peers/docker-cli.js'
import { bareExec, createFloorSandbox, removeFloorSandbox } from './peers/dockerode-floor.js'
import { startTestcontainer } from './peers/testcontainers.js'
import { engineCallTable } from './profile-table.js'
import type { Scenario } from './scenario.js'
import { formatRatio, ratio, summarize } from './stats.js'

export function execRoundTripScenario(variant: BenchRuntime): Scenario {
  return async ({ quick, log }) => {
    const runtime = variant.engineRuntime
    const provider = cordonProvider({ runtime })
    const warmup = quick ? 3 : 5
    const iterations = quick ? 10 : 40
    const sandbox = await provider.create()
    const floor = await createFloorSandbox(undefined, { runtime })
    const tc = variant.everyPeer ? await startTestcontainer(runtime) : undefined
    try {
      const arms = [
        {
          name: 'cordon',
          run: async () => {
            const result = await sandbox.exec('true')
            if (result.exitCode !== 0) throw new Error(`cordon: true exited ${result.exitCode}`)
          },
        },
        {
          name: 'dockerode',
          run: async () => {
            const code = await bareExec(floor.container, ['true'])
            if (code !== 0) throw new Error(`dockerode: true exited ${code}`)
          },
        },
        ...(tc
          ? [
              {
                name: 'testcontainers',
                run: async () => {
                  const result = await tc.exec(['true'])
                  if (result.exitCode !== 0)
                    throw new Error(`testcontainers: true exited ${result.exitCode}`)
                },
              },
            ]
          : []),
        {
          name: 'docker exec',
          run: async () => {
            await cliExec(floor.container.id, ['true'])
          },
        },
      ]
      const samples = await interleave(arms, {
        warmup,
        iterations,
        onRun: (arm, round, ms, isWarmup) =>
          log(`  ${arm} #${round}${isWarmup ? ' (warm-up)' : ''}: ${ms.toFixed(2)} ms`),
      })
      const s = (name: string) => summarize(samples.get(name)!)
      const cordon = s('cordon')
      const bare = s('dockerode')
      const tcExec = tc ? s('testcontainers') : undefined
      const cli = s('docker exec')
      const cordonTrace = await traceEngineCalls(async () => {
        await sandbox.exec('true')
      })
      const bareTrace = await traceEngineCalls(async () => {
        await bareExec(floor.container, ['true'])
      })
      const scenario = `3 exec round trip${variant.label}`
      return {
        id: `exec-round-trip${variant.idSuffix}`,
        title: `3. Exec round trip on a running sandbox${variant.label}`,
        method: `${warmup} warm-up + ${iterations} measured rounds per arm, round-robin, each arm on its own running hardened container (the CLI uses the floor's)${runtime ? `, every container under \`runtime: '${runtime}'\`` : ''}. Timed: \`true\` from the call to its exit code being known.`,
        tables: [
          {
            caption: `Exec round trip${variant.label}`,
            arms: [
              { name: 'cordon (`sandbox.exec`)', summary: cordon, unit: 'ms' },
              { name: 'dockerode (exec create, start, inspect)', summary: bare, unit: 'ms' },
              ...(tcExec
                ? [{ name: 'testcontainers (`container.exec`)', summary: tcExec, unit: 'ms' }]
                : []),
              { name: '`docker exec`', summary: cli, unit: 'ms' },
            ],
          },
        ],
        comparisons: [
          {
            scenario,
            what: 'cordon / bare dockerode',
            ratio: formatRatio(ratio(cordon, bare)),
            target: '≤ 0.10x',
            met: ratio(cordon, bare) <= 0.1,
          },
          {
            scenario,
            what: 'cordon p95 / bare dockerode p95',
            ratio: formatRatio(cordon.p95 / bare.p95),
            target: '(report)',
            met: undefined,
          },
          ...(tcExec
            ? [
                {
                  scenario,
                  what: 'cordon / testcontainers `exec`',
                  ratio: formatRatio(ratio(cordon, tcExec)),
                  target: '≤ 0.10x',
                  met: ratio(cordon, tcExec) <= 0.1,
                },
              ]
            : []),
          {
            scenario,
            what: 'cordon / `docker exec`',
            ratio: formatRatio(ratio(cordon, cli)),
            target: '≤ 0.10x',
            met: ratio(cordon, cli) <= 0.1,
          },
          ...(tcExec
            ? [
                {
                  scenario,
                  what: 'bare dockerode / testcontainers `exec`',
                  ratio: formatRatio(ratio(bare, tcExec)),
                  target: '(bound)',
                  met: undefined,
                },
              ]
            : []),
        ],
        notes: [],
        sections: [
          '#### Profile: engine calls of one exec',
          engineCallTable('cordon', cordonTrace),
          engineCallTable('bare dockerode', bareTrace),
        ],
      }
    } finally {
      await provider.close()
      await removeFloorSandbox(floor)
      if (tc) {
        await removeContainer(tc.getId())
        await removeVolume(`${tc.getName().replace(/^\//, '')}-outputs`)
      }
    }
  }
}

/** Scenario 3 under the engine's default runtime (runc). */
export const execRoundTrip: Scenario = execRoundTripScenario(RUNC)
