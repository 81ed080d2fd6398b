/**
 * Scenario 13: filesystem snapshots and fork, under runc and gVisor.
 * Timed: `sandbox.snapshot()` of a sandbox holding a small workspace (and the
 * snapshot's size); `create({ snapshot })` to the first exec against a cold
 * `create()` to the first exec of the same image, interleaved; and
 * `fork({ count: 4 })` against four cold creates made at once.
 *
 * Memory snapshots (a sandbox whose start is expensive, restored with its
 * processes) are not measured: the Docker backend refuses them
 * (`memorySnapshot: false`), and a refusal has no latency worth a row.
 */
import type { CordonSandbox } from '@cordon/core'
import { cordonProvider } from './cordon.js'
import { interleave } from './interleave.js'
import type { ArmResult, Comparison, Scenario } from './scenario.js'
import { formatRatio, ratio, summarize } from './stats.js'

const RUNTIMES = ['runc', 'runsc'] as const
const FORKS = 4

/** A workspace of a few hundred files, about 2 MiB, made inside the sandbox. */
const WORKSPACE = [
  '-c',
  'mkdir -p src && i=0; while [ $i -lt 200 ]; do echo "file $i" > src/f$i.txt; i=$((i+1)); done; dd if=/dev/urandom of=blob.bin bs=1024 count=2048 2>/dev/null',
]

export const snapshotFork: Scenario = async ({ quick, log }) => {
  const warmup = quick ? 1 : 2
  const iterations = quick ? 3 : 8
  const forkRounds = quick ? 2 : 4
  const tables: Array<{ caption: string; arms: ArmResult[] }> = []
  const comparisons: Comparison[] = []
  const notes: string[] = []
  for (const runtime of RUNTIMES) {
    const provider = cordonProvider({ runtime })
    let source: CordonSandbox | undefined
    const snapshots: string[] = []
    try {
      source = await provider.create()
      const prepared = await source.exec('sh', WORKSPACE)
      if (prepared.exitCode !== 0) throw new Error(`workspace: ${prepared.stderr}`)
      const from = source
      let sizeBytes = 0
      let restoreFrom: string | undefined
      const samples = await interleave(
        [
          {
            name: 'snapshot',
            run: async () => {
              const taken = await from.snapshot()
              snapshots.push(taken.id)
              sizeBytes = taken.sizeBytes
              restoreFrom ??= taken.id
            },
          },
          {
            name: 'create from snapshot + first exec',
            prepare: async () => {
              if (!restoreFrom) {
                const taken = await from.snapshot()
                snapshots.push(taken.id)
                restoreFrom = taken.id
              }
            },
            run: async () => {
              const sandbox = await provider.create({ snapshot: restoreFrom! })
              const result = await sandbox.exec('true')
              if (result.exitCode !== 0) throw new Error('true failed')
              await sandbox.destroy()
            },
          },
          {
            name: 'cold create + first exec',
            run: async () => {
              const sandbox = await provider.create()
              const result = await sandbox.exec('true')
              if (result.exitCode !== 0) throw new Error('true failed')
              await sandbox.destroy()
            },
          },
        ],
        {
          warmup,
          iterations,
          onRun: (arm, round, ms, isWarmup) =>
            log(
              `  ${runtime} ${arm} #${round}${isWarmup ? ' (warm-up)' : ''}: ${ms.toFixed(0)} ms`,
            ),
        },
      )
      // Fork of 4 against 4 cold creates at once; each set destroyed untimed.
      const forkSamples = await interleave(
        [
          {
            name: `fork of ${FORKS}`,
            run: async () => {
              const forks = await from.fork({ count: FORKS })
              await Promise.all(forks.map((fork) => fork.exec('true')))
              await Promise.all(forks.map((fork) => fork.destroy()))
            },
          },
          {
            name: `${FORKS} cold creates`,
            run: async () => {
              const made = await Promise.all(Array.from({ length: FORKS }, () => provider.create()))
              await Promise.all(made.map((sandbox) => sandbox.exec('true')))
              await Promise.all(made.map((sandbox) => sandbox.destroy()))
            },
          },
        ],
        {
          warmup: 0,
          iterations: forkRounds,
          onRun: (arm, round, ms) => log(`  ${runtime} ${arm} #${round}: ${ms.toFixed(0)} ms`),
        },
      )
      const s = (name: string) => summarize(samples.get(name)!)
      const f = (name: string) => summarize(forkSamples.get(name)!)
      const [snap, restored, cold, fork, colds] = [
        s('snapshot'),
        s('create from snapshot + first exec'),
        s('cold create + first exec'),
        f(`fork of ${FORKS}`),
        f(`${FORKS} cold creates`),
      ]
      tables.push({
        caption: `Snapshots and fork (${runtime})`,
        arms: [
          {
            name: '`sandbox.snapshot()`',
            summary: snap,
            unit: 'ms',
            extra: { size: `${(sizeBytes / 1024 / 1024).toFixed(2)} MiB` },
          },
          { name: '`create({ snapshot })` + first exec', summary: restored, unit: 'ms' },
          { name: 'cold `create()` + first exec', summary: cold, unit: 'ms' },
          {
            name: `\`fork({ count: ${FORKS} })\` + an exec in each`,
            summary: fork,
            unit: 'ms',
          },
          { name: `${FORKS} cold creates at once + an exec in each`, summary: colds, unit: 'ms' },
        ],
      })
      comparisons.push(
        {
          scenario: '13 snapshots and fork',
          what: `create from a filesystem snapshot / cold create, to first exec (${runtime})`,
          ratio: formatRatio(ratio(restored, cold)),
          target: '(report)',
          met: undefined,
        },
        {
          scenario: '13 snapshots and fork',
          what: `fork of ${FORKS} / ${FORKS} cold creates (${runtime})`,
          ratio: formatRatio(ratio(fork, colds)),
          target: '(report)',
          met: undefined,
        },
      )
      notes.push(
        `${runtime}: a snapshot of the ~2 MiB workspace (200 files and a 2 MiB blob) stores ${sizeBytes} bytes.`,
      )
    } finally {
      await source?.destroy()
      for (const id of snapshots) await provider.snapshots.remove(id).catch(() => {})
      await provider.close()
    }
  }
  return {
    id: 'snapshot-fork',
    title: '14. Snapshots and fork',
    method: `Per runtime (runc, then gVisor): one source sandbox holding 200 small files and a 2 MiB blob in its outputs. ${warmup} warm-up + ${iterations} measured rounds per arm, round-robin: \`sandbox.snapshot()\`; \`create({ snapshot })\` then \`exec('true')\` (the sandbox destroyed inside the timed run, in both arms alike) against a cold \`create()\` then \`exec('true')\`. Then ${forkRounds} rounds of \`fork({ count: ${FORKS} })\` with an exec in each fork, against ${FORKS} cold creates at once with an exec in each (both destroy what they made inside the timed run).`,
    tables,
    comparisons,
    notes: [
      ...notes,
      'A sandbox created from a snapshot is a cold create plus laying the files out again (an engine exec running Node as the new user), so it cannot be faster than a cold create; fork adds one snapshot to its creates.',
      'Memory snapshots are refused by the Docker backend (memorySnapshot: false), so the memory-restore row of issue 29 item 7 is not measured.',
    ],
    sections: [],
  }
}
