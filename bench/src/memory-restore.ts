/**
 * Scenario 15 (issue 29 item 7): create from a memory snapshot of a sandbox
 * whose start is expensive, to that work being usable, against a cold start
 * doing the same work; gVisor (the runtime that can take memory snapshots).
 *
 * The expensive start: a Node process that builds a large in-memory table
 * (about 1-2 s of CPU on this machine: the stand-in for a large module graph
 * being loaded), then answers requests from it. "Usable" is the first
 * request answered. Cold arm: `create()`, start the process, wait for its
 * answer. Memory arm: `create({ snapshot })` from a memory snapshot taken of
 * a sandbox whose process had finished its start, then the same request.
 */
import type { CordonSandbox } from '@cordon/core'
import { cordonProvider } from './cordon.js'
import { interleave } from './interleave.js'
import type { Comparison, Scenario } from './scenario.js'
import { formatRatio, ratio, summarize } from './stats.js'

const NODE_IMAGE = process.env.CORDON_BENCH_NODE_IMAGE ?? 'cordon-test/node:latest'

/**
 * The program with the expensive start: it fills a table (the work), says
 * so in /tmp/ready, then answers each /tmp/req with /tmp/ans from the table.
 */
const EXPENSIVE_START = String.raw`
const fs = require('fs')
const table = new Map()
let h = 7
for (let i = 0; i < 1500000; i++) {
  h = (h * 31 + i) % 1000003
  table.set('k' + i, { h, s: 'v' + (h % 977) })
}
fs.writeFileSync('/tmp/ready', String(table.size))
setInterval(() => {
  if (!fs.existsSync('/tmp/req')) return
  const key = fs.readFileSync('/tmp/req', 'utf8').trim()
  fs.unlinkSync('/tmp/req')
  fs.writeFileSync('/tmp/ans.new', JSON.stringify(table.get(key)))
  fs.renameSync('/tmp/ans.new', '/tmp/ans')
}, 5)
`

/** Asks the process one question and waits for its answer: the work is usable then. */
const ASK = [
  '-c',
  'echo k12345 > /tmp/req.new && mv /tmp/req.new /tmp/req; until [ -f /tmp/ans ]; do sleep 0.01; done; cat /tmp/ans',
]

async function ask(sandbox: CordonSandbox): Promise<void> {
  const answer = await sandbox.exec('sh', ASK, { timeout: 60_000 })
  if (answer.exitCode !== 0 || !answer.stdout.includes('"h"'))
    throw new Error(`no answer: ${answer.stdout} ${answer.stderr}`)
}

export const memoryRestore: Scenario = async ({ quick, log }) => {
  const warmup = quick ? 1 : 2
  const iterations = quick ? 3 : 8
  const provider = cordonProvider({ runtime: 'runsc', image: NODE_IMAGE })
  let source: CordonSandbox | undefined
  let snapshotId: string | undefined
  let snapshotMs = 0
  let sizeBytes = 0
  try {
    source = await provider.create({ memoryLimitMb: 512 })
    await source.start('node', ['-e', EXPENSIVE_START])
    // The source's start is done: its table is built and it answers.
    await ask(source)
    await source.exec('rm', ['-f', '/tmp/ans'])
    const started = performance.now()
    const taken = await source.snapshot({ memory: true })
    snapshotMs = performance.now() - started
    snapshotId = taken.id
    sizeBytes = taken.sizeBytes
    const from = taken.id
    const samples = await interleave(
      [
        {
          name: 'memory',
          run: async () => {
            const sandbox = await provider.create({ snapshot: from })
            try {
              await ask(sandbox)
            } finally {
              await sandbox.destroy()
            }
          },
        },
        {
          name: 'cold',
          run: async () => {
            const sandbox = await provider.create({ memoryLimitMb: 512 })
            try {
              await sandbox.start('node', ['-e', EXPENSIVE_START])
              await ask(sandbox)
            } finally {
              await sandbox.destroy()
            }
          },
        },
      ],
      {
        warmup,
        iterations,
        onRun: (arm, round, ms, isWarmup) =>
          log(`  runsc ${arm} #${round}${isWarmup ? ' (warm-up)' : ''}: ${ms.toFixed(0)} ms`),
      },
    )
    const memory = summarize(samples.get('memory')!)
    const cold = summarize(samples.get('cold')!)
    const comparisons: Comparison[] = [
      {
        scenario: '15 memory restore',
        what: 'create from a memory snapshot / cold create + the same start, to the work being usable (runsc)',
        ratio: formatRatio(ratio(memory, cold)),
        target: '≤ 0.5x',
        met: memory.median <= 0.5 * cold.median,
      },
    ]
    return {
      id: 'memory-restore',
      title: '15. Memory snapshot restore against a cold start (gVisor)',
      method: `gVisor (runtime runsc), image ${NODE_IMAGE}. A source sandbox runs a Node process whose start builds a 1.5 million entry table (the expensive start), then answers a request read from /tmp/req. One \`snapshot({ memory: true })\` of it, taken once the start is done. ${warmup} warm-up + ${iterations} measured rounds per arm, round-robin: \`create({ snapshot })\` then one request answered, against \`create()\` + \`start('node', ...)\` then one request answered (the answer comes only once the table is built). Each sandbox is destroyed inside its timed run, in both arms alike.`,
      tables: [
        {
          caption: 'Memory restore against a cold start (runsc)',
          arms: [
            {
              name: '`create({ snapshot })` of a memory snapshot + first answer',
              summary: memory,
              unit: 'ms',
            },
            { name: 'cold `create()` + the same start + first answer', summary: cold, unit: 'ms' },
          ],
        },
      ],
      comparisons,
      notes: [
        `\`snapshot({ memory: true })\` of the source took ${snapshotMs.toFixed(0)} ms (checkpoint, record, and the source started again from its checkpoint); the checkpoint holds ${(sizeBytes / 1024 / 1024).toFixed(1)} MiB.`,
        "A restored sandbox is a container created with the source's spec, its checkpoint copied into the container's directory, the engine's start from that checkpoint (gVisor's restore), and the agent resumed with a new secret over a relay.",
      ],
      sections: [],
    }
  } finally {
    await source?.destroy()
    if (snapshotId) await provider.snapshots.remove(snapshotId).catch(() => {})
    await provider.close()
  }
}
