/**
 * Scenario 1: from "give me a sandbox" to the first command (`true`) having
 * run in it, hardened and deny-all, for cordon, the bare dockerode floor,
 * testcontainers-node and the docker CLI; under gVisor, cordon and the floor.
 */
import type { CordonSandbox, SandboxEvent } from '@cordon/core'
import { type BenchRuntime, RUNC } from './bench-runtime.js'
import { cordonProvider } from './cordon.js'
import { docker, removeContainer, removeVolume, uniqueName } from './engine.js'
import { traceEngineCalls } from './engine-trace.js'
import {
  DIFFERENT_BY_DESIGN,
  fingerprintDifferences,
  hardeningFingerprint,
} from './hardening-parity.js'
import { type Holder, interleave } from './interleave.js'
import { cliExec, cliRun } from './peers/docker-cli.js'
import {
  bareExec,
  createFloorSandbox,
  type FloorSandbox,
  removeFloorSandbox,
} from './peers/dockerode-floor.js'
import { type StartedTestContainer, startTestcontainer } from './peers/testcontainers.js'
import { createStepsTable, engineCallTable } from './profile-table.js'
import type { Scenario } from './scenario.js'
import { formatRatio, ratio, summarize } from './stats.js'

export function createToFirstExecScenario(variant: BenchRuntime): Scenario {
  return async ({ quick, log }) => {
    const runtime = variant.engineRuntime
    // The create steps of every measured cordon create (warm-ups left out), as the provider reports them.
    const steps: Array<Readonly<Record<string, number>>> = []
    let recording = false
    let lastSteps: Readonly<Record<string, number>> | undefined
    const onEvent = (event: SandboxEvent) => {
      if (recording && event.type === 'lifecycle' && event.phase === 'create.ready')
        lastSteps = event.steps
    }
    const provider = cordonProvider({ runtime, onEvent })
    const warmup = quick ? 1 : 3
    const iterations = quick ? 3 : 12
    try {
      const arms = [
        {
          name: 'cordon',
          prepare: async (): Promise<Holder<CordonSandbox>> => {
            recording = true
            return {}
          },
          run: async (holder: Holder<CordonSandbox>) => {
            holder.value = await provider.create()
            const result = await holder.value.exec('true')
            if (result.exitCode !== 0) throw new Error(`cordon: true exited ${result.exitCode}`)
          },
          cleanup: async (holder: Holder<CordonSandbox>) => {
            recording = false
            await holder.value?.destroy()
          },
        },
        {
          name: 'dockerode floor',
          prepare: async (): Promise<Holder<FloorSandbox>> => ({}),
          run: async (holder: Holder<FloorSandbox>) => {
            holder.value = await createFloorSandbox(undefined, { runtime })
            const code = await bareExec(holder.value.container, ['true'])
            if (code !== 0) throw new Error(`floor: true exited ${code}`)
          },
          cleanup: async (holder: Holder<FloorSandbox>) => {
            if (holder.value) await removeFloorSandbox(holder.value)
          },
        },
        ...(variant.everyPeer
          ? [
              {
                name: 'testcontainers',
                prepare: async (): Promise<Holder<StartedTestContainer>> => ({}),
                run: async (holder: Holder<StartedTestContainer>) => {
                  holder.value = await startTestcontainer(runtime)
                  const result = await holder.value.exec(['true'])
                  if (result.exitCode !== 0)
                    throw new Error(`testcontainers: true exited ${result.exitCode}`)
                },
                cleanup: async (holder: Holder<StartedTestContainer>) => {
                  if (!holder.value) return
                  await removeContainer(holder.value.getId())
                  await removeVolume(`${holder.value.getName().replace(/^\//, '')}-outputs`)
                },
              },
              {
                name: 'docker CLI',
                prepare: async (): Promise<Holder<string>> => ({ value: uniqueName('cli') }),
                run: async (holder: Holder<string>) => {
                  const id = await cliRun(holder.value!, runtime)
                  await cliExec(id, ['true'])
                },
                cleanup: async (holder: Holder<string>) => {
                  await removeContainer(holder.value!)
                  await removeVolume(`${holder.value!}-outputs`)
                },
              },
            ]
          : []),
      ]
      const samples = await interleave(arms, {
        warmup,
        iterations,
        onRun: (arm, round, ms, isWarmup) => {
          if (arm === 'cordon' && !isWarmup && lastSteps) steps.push(lastSteps)
          if (arm === 'cordon') lastSteps = undefined
          log(`  ${arm} #${round}${isWarmup ? ' (warm-up)' : ''}: ${ms.toFixed(1)} ms`)
        },
      })
      const summaries = new Map([...samples].map(([name, values]) => [name, summarize(values)]))
      const cordon = summaries.get('cordon')!
      const floor = summaries.get('dockerode floor')!
      const tc = summaries.get('testcontainers')
      const cli = summaries.get('docker CLI')

      // Hardening parity, from the engine's side.
      const parity = await checkParity(provider, variant)

      // Profile: one traced create-to-first-exec each for cordon and the floor.
      let sandbox: CordonSandbox | undefined
      const cordonTrace = await traceEngineCalls(async () => {
        sandbox = await provider.create()
        await sandbox.exec('true')
      })
      await sandbox?.destroy()
      let floorSandbox: FloorSandbox | undefined
      const floorTrace = await traceEngineCalls(async () => {
        floorSandbox = await createFloorSandbox(undefined, { runtime })
        await bareExec(floorSandbox.container, ['true'])
      })
      if (floorSandbox) await removeFloorSandbox(floorSandbox)

      const scenario = `1 create to first exec${variant.label}`
      return {
        id: `create-to-first-exec${variant.idSuffix}`,
        title: `1. Create to first exec (\`true\`), hardened, deny-all${variant.label}`,
        method: `${warmup} warm-up + ${iterations} measured rounds per arm, round-robin. Timed: from the create call to \`true\` having exited 0. Untimed: removing the container and its volume after each run.`,
        tables: [
          {
            caption: `Create to first exec${variant.label}`,
            arms: [
              { name: 'cordon (`provider.create()` + `exec`)', summary: cordon, unit: 'ms' },
              { name: 'dockerode floor (volume, create, start, exec)', summary: floor, unit: 'ms' },
              ...(tc
                ? [
                    {
                      name: 'testcontainers (`GenericContainer.start()` + `exec`)',
                      summary: tc,
                      unit: 'ms',
                    },
                  ]
                : []),
              ...(cli
                ? [{ name: 'docker CLI (`run -d` + `exec`)', summary: cli, unit: 'ms' }]
                : []),
            ],
          },
        ],
        comparisons: [
          {
            scenario,
            what: 'cordon / dockerode floor',
            ratio: formatRatio(ratio(cordon, floor)),
            target: '≤ 1.00x',
            met: ratio(cordon, floor) <= 1.0,
          },
          ...(tc
            ? [
                {
                  scenario,
                  what: 'cordon / testcontainers',
                  ratio: formatRatio(ratio(cordon, tc)),
                  target: '≤ 0.80x',
                  met: ratio(cordon, tc) <= 0.8,
                },
              ]
            : []),
          ...(cli
            ? [
                {
                  scenario,
                  what: 'cordon / docker CLI',
                  ratio: formatRatio(ratio(cordon, cli)),
                  target: '(report)',
                  met: undefined,
                },
              ]
            : []),
          ...(tc
            ? [
                {
                  scenario,
                  what: 'dockerode floor / testcontainers',
                  ratio: formatRatio(ratio(floor, tc)),
                  target: '(bound: cordon cannot go below the floor)',
                  met: undefined,
                },
              ]
            : []),
        ],
        notes: [
          ...(variant.everyPeer
            ? [
                'testcontainers runs with the reaper disabled (`TESTCONTAINERS_RYUK_DISABLED=true`: its image cannot be pulled here) and the default pull policy, which never pulls an image that exists locally; the bench removes its containers itself.',
                'testcontainers and the CLI get the tmpfs workspace volume created inline by the engine as part of container create (`Mounts[].VolumeOptions.DriverConfig`, `--mount volume-opt=...`), one API call fewer than cordon and the floor make; this can only favour them.',
              ]
            : [
                `Every container of this scenario runs under \`runtime: '${runtime}'\`, cordon's and the floor's alike (the parity check below compares the runtime too). testcontainers and the CLI's \`docker run\` are left out here: the target names the floor.`,
              ]),
          parity.length === 0
            ? `Hardening parity: the engine reports the same runtime, read-only rootfs, dropped capabilities, security options, CPU, init, privileged mode, IPC, network and pid namespace for the cordon and floor${variant.everyPeer ? ', testcontainers and CLI' : ''} containers. Different by design: ${Object.entries(
                DIFFERENT_BY_DESIGN,
              )
                .map(([field, why]) => `${field} (${why})`)
                .join('; ')}.`
            : `Hardening parity differences: ${parity.join('; ')}`,
        ],
        sections: [
          `#### Profile: cordon's create steps, from \`create.ready\`'s \`steps\` (the ${steps.length} measured creates above)`,
          createStepsTable(steps),
          '#### Profile: engine calls of one create-to-first-exec',
          engineCallTable('cordon', cordonTrace),
          engineCallTable('dockerode floor', floorTrace),
        ],
      }
    } finally {
      await provider.close()
    }
  }
}

/** Scenario 1 under the engine's default runtime (runc). */
export const createToFirstExec: Scenario = createToFirstExecScenario(RUNC)

async function checkParity(
  provider: ReturnType<typeof cordonProvider>,
  variant: BenchRuntime,
): Promise<string[]> {
  const runtime = variant.engineRuntime
  const sandbox = await provider.create()
  const floor = await createFloorSandbox(undefined, { runtime })
  const tc = variant.everyPeer ? await startTestcontainer(runtime) : undefined
  const cliName = uniqueName('cli')
  const cliId = variant.everyPeer ? await cliRun(cliName, runtime) : undefined
  try {
    const [cordonContainer] = await docker.listContainers({
      filters: { label: [`cordon.sandbox=${sandbox.id}`] },
    })
    const reference = await hardeningFingerprint(cordonContainer!.Id)
    const differences: string[] = []
    const peers: Array<readonly [string, string]> = [['floor', floor.container.id]]
    if (tc) peers.push(['testcontainers', tc.getId()])
    if (cliId) peers.push(['docker CLI', cliId])
    for (const [name, id] of peers) {
      for (const line of fingerprintDifferences(reference, await hardeningFingerprint(id)))
        differences.push(`${name}: ${line}`)
    }
    return differences
  } finally {
    await sandbox.destroy()
    await removeFloorSandbox(floor)
    if (tc) {
      await removeContainer(tc.getId())
      await removeVolume(`${tc.getName().replace(/^\//, '')}-outputs`)
    }
    if (cliId) {
      await removeContainer(cliId)
      await removeVolume(`${cliName}-outputs`)
    }
  }
}
