/**
 * Scenario 15 (issue 29 item 7): create from a memory snapshot of a sandbox
 * whose start is expensive, to that work being usable, against a cold start
 * doing the same work; gVisor (the runtime that can take memory snapshots).
 *
 * The expensive start: a Node process that does its start-up work (two
 * kinds, PROFILES), then answers requests from what it built. "Usable" is
 * the first request answered. Cold arm: `create()`, start the process, wait
 * for its answer. Memory arm: `create({ snapshot })` from a memory snapshot
 * taken of a sandbox whose process had finished its start, then the same
 * request.
 */
import type { CordonSandbox } from '@cordon/core'
import { cordonProvider } from './cordon.js'
import { type Holder, interleave } from './interleave.js'
import type { ArmResult, Comparison, Scenario } from './scenario.js'
import { formatRatio, ratio, summarize } from './stats.js'

const NODE_IMAGE = process.env.CORDON_BENCH_NODE_IMAGE ?? 'cordon-test/node:latest'

/**
 * The programs with an expensive start: each does its start-up work, says
 * so in `ready`, then answers each `req` with `ans` (in its working directory) from what the
 * work built. `cpu`: about 2 s of computation into a small table (the
 * stand-in for start-up work whose result is small, like a module graph
 * compiled and linked); `heap`: an 800 000 entry table (tens of MB of
 * heap), where a restore has that much memory to bring back.
 */
const PROFILES = {
  cpu: `
const fs = require('fs')
const table = new Map()
let h = 7
for (let i = 0; i < 120000000; i++) {
  h = (h * 31 + i) % 1000003
  if (i % 2000 === 0) table.set('k' + (i / 2000), { h, s: 'v' + (h % 977) })
}
table.set('k12345', { h, s: 'v' + (h % 977) })
`,
  heap: `
const fs = require('fs')
const table = new Map()
let h = 7
for (let i = 0; i < 800000; i++) {
  h = (h * 31 + i) % 1000003
  table.set('k' + i, { h, s: 'v' + (h % 977) })
}
`,
} as const

const SERVE = `
fs.writeFileSync('ready', String(table.size))
setInterval(() => {
  if (!fs.existsSync('req')) return
  const key = fs.readFileSync('req', 'utf8').trim()
  fs.unlinkSync('req')
  fs.writeFileSync('ans.new', JSON.stringify(table.get(key)))
  fs.renameSync('ans.new', 'ans')
}, 5)
`

/** How often the host looks for the answer. */
const ANSWER_POLL_MS = 5

/**
 * Asks the process one question through the file API and waits for its
 * answer: the work is usable then. Not through a shell: each process a
 * sandbox ever ran stays in this gVisor's kernel state (about 24 procfs
 * inodes each, about 2 ms more per restore; bench/misses.md), so a polling
 * shell loop in the source before its checkpoint would make every restore
 * pay for the bench's own apparatus.
 */
async function ask(sandbox: CordonSandbox): Promise<void> {
  await sandbox.writeFile('req', 'k12345\n')
  const until = performance.now() + 60_000
  while (performance.now() < until) {
    const answer = await sandbox.readFile('ans').then(
      (bytes) => bytes.toString('utf8'),
      () => undefined,
    )
    if (answer?.includes('"h"')) return
    await new Promise((resolve) => setTimeout(resolve, ANSWER_POLL_MS))
  }
  throw new Error('no answer within 60 s')
}

/** Tears a timed run's sandbox down after the clock stops, in both arms alike. */
async function destroyHeld(holder: Holder<CordonSandbox>): Promise<void> {
  await holder.value?.destroy()
}

export const memoryRestore: Scenario = async ({ quick, log }) => {
  const warmup = quick ? 1 : 2
  const iterations = quick ? 3 : 6
  const tables: Array<{ caption: string; arms: ArmResult[] }> = []
  const comparisons: Comparison[] = []
  const notes: string[] = []
  for (const profile of ['cpu', 'heap'] as const) {
    const program = PROFILES[profile] + SERVE
    const provider = cordonProvider({ runtime: 'runsc', image: NODE_IMAGE })
    let source: CordonSandbox | undefined
    let snapshotId: string | undefined
    try {
      source = await provider.create({ memoryLimitMb: 768 })
      await source.start('node', ['-e', program])
      // The source's start is done: its table is built and it answers.
      await ask(source)
      await source.removeFile('ans')
      const started = performance.now()
      const taken = await source.snapshot({ memory: true })
      const snapshotMs = performance.now() - started
      snapshotId = taken.id
      const from = taken.id
      const samples = await interleave(
        [
          {
            name: 'memory',
            prepare: async (): Promise<Holder<CordonSandbox>> => ({}),
            run: async (holder: Holder<CordonSandbox>) => {
              holder.value = await provider.create({ snapshot: from })
              await ask(holder.value)
            },
            cleanup: destroyHeld,
          },
          {
            name: 'cold',
            prepare: async (): Promise<Holder<CordonSandbox>> => ({}),
            run: async (holder: Holder<CordonSandbox>) => {
              holder.value = await provider.create({ memoryLimitMb: 768 })
              await holder.value.start('node', ['-e', program])
              await ask(holder.value)
            },
            cleanup: destroyHeld,
          },
        ],
        {
          warmup,
          iterations,
          onRun: (arm, round, ms, isWarmup) =>
            log(
              `  runsc ${profile} ${arm} #${round}${isWarmup ? ' (warm-up)' : ''}: ${ms.toFixed(0)} ms`,
            ),
        },
      )
      const memory = summarize(samples.get('memory')!)
      const cold = summarize(samples.get('cold')!)
      tables.push({
        caption: `Memory restore against a cold start (runsc, ${profile === 'cpu' ? '~2 s of start-up computation, small heap' : '800 k entry table, tens of MB of heap'})`,
        arms: [
          {
            name: '`create({ snapshot })` of a memory snapshot + first answer',
            summary: memory,
            unit: 'ms',
            extra: { checkpoint: `${(taken.sizeBytes / 1024 / 1024).toFixed(1)} MiB` },
          },
          { name: 'cold `create()` + the same start + first answer', summary: cold, unit: 'ms' },
        ],
      })
      comparisons.push({
        scenario: '15 memory restore',
        what: `create from a memory snapshot / cold create + the same start, to the work being usable (runsc, ${profile === 'cpu' ? 'start-up computation' : 'large heap'})`,
        ratio: formatRatio(ratio(memory, cold)),
        target: profile === 'cpu' ? '≤ 0.5x' : '(report)',
        met: profile === 'cpu' ? memory.median <= 0.5 * cold.median : undefined,
      })
      notes.push(
        `${profile}: \`snapshot({ memory: true })\` of the source took ${snapshotMs.toFixed(0)} ms (suspend, checkpoint, record, and the source started again from its checkpoint); the checkpoint holds ${(taken.sizeBytes / 1024 / 1024).toFixed(1)} MiB.`,
      )
    } finally {
      await source?.destroy()
      if (snapshotId) await provider.snapshots.remove(snapshotId).catch(() => {})
      await provider.close()
    }
  }
  return {
    id: 'memory-restore',
    title: '15. Memory snapshot restore against a cold start (gVisor)',
    method: `gVisor (runtime runsc), image ${NODE_IMAGE}. Two start-ups, each its own source sandbox running a Node process that does its start-up work then answers a request it reads from \`req\` in the workspace (written, and the answer \`ans\` read, through the file API, so the bench itself starts no process in either arm): \`cpu\` (about 2 s of computation into a small table) and \`heap\` (an 800 000 entry table, tens of MB of heap). One \`snapshot({ memory: true })\` of each, taken once its start is done. ${warmup} warm-up + ${iterations} measured rounds per arm, round-robin: \`create({ snapshot })\` then one request answered, against \`create()\` + \`start('node', ...)\` then one request answered (the answer comes only once the start-up work is done). Each sandbox is destroyed after its timed run, outside the clock, in both arms alike (as in scenario 1).`,
    tables,
    comparisons,
    notes: [
      ...notes,
      "A restored sandbox is a container created with the source's spec, its checkpoint copied into the container's directory, the engine's start from that checkpoint (its upload to containerd, then gVisor's restore, which reads the whole checkpoint back into memory), and the agent resumed with a new secret, its session moved onto its direct socket through one engine exec of `cordon-launcher --pipe`. Its cost grows with the memory the sandbox held: with tens of MB of heap it gains little or nothing over doing the work again.",
    ],
    sections: [],
  }
}
