/**
 * Scenario 13: connect from a second process to the first exec, against a
 * cold create to the first exec, under runc and gVisor. The first process
 * (this one) creates a detached sandbox, untimed; a second, already running
 * Node process (reconnect-worker.ts) connects to it by id, with the
 * credential the first left in the credential store, and runs `true`. The
 * second process times that itself (its `connect()` to the exec's result);
 * the line back to this process is not counted.
 */
import { type ChildProcess, spawn } from 'node:child_process'
import { createInterface, type Interface } from 'node:readline'
import { fileURLToPath } from 'node:url'
import type { CordonSandbox } from '@cordon/core'
import { cordonProvider } from './cordon.js'
import { interleave } from './interleave.js'
import type { ArmResult, Comparison, Scenario } from './scenario.js'
import { formatRatio, ratio, summarize } from './stats.js'

const RUNTIMES = ['runc', 'runsc'] as const

/** The second process, and its answers in order. */
class Worker {
  private readonly child: ChildProcess
  private readonly lines: AsyncIterator<string>

  constructor() {
    this.child = spawn(
      process.execPath,
      [fileURLToPath(new URL('./reconnect-worker.js', import.meta.url))],
      { stdio: ['pipe', 'pipe', 'inherit'] },
    )
    const reader: Interface = createInterface({ input: this.child.stdout! })
    this.lines = reader[Symbol.asyncIterator]()
  }

  /** Asks the worker to connect to `id` and run `true`; resolves with its own timing. */
  async connectAndExec(runtime: string, id: string): Promise<number> {
    this.child.stdin!.write(`${runtime} ${id}\n`)
    const { value, done } = await this.lines.next()
    if (done) throw new Error('the worker process ended')
    const answer = JSON.parse(value) as { ms?: number; error?: string }
    if (answer.ms === undefined) throw new Error(`the worker failed: ${answer.error}`)
    return answer.ms
  }

  async close(): Promise<void> {
    this.child.stdin!.end()
    await new Promise((resolve) => this.child.once('exit', resolve))
  }
}

export const reconnect: Scenario = async ({ quick, log }) => {
  const warmup = quick ? 1 : 3
  const iterations = quick ? 5 : 12
  const tables: Array<{ caption: string; arms: ArmResult[] }> = []
  const comparisons: Comparison[] = []
  const worker = new Worker()
  try {
    for (const runtime of RUNTIMES) {
      const provider = cordonProvider({ runtime })
      // The worker's own timing of each connect, by round (interleave times the whole call).
      const connectMs: number[] = []
      try {
        const samples = await interleave(
          [
            {
              name: 'connect from a second process to first exec',
              prepare: () => provider.create({ detached: true, lifetimeMs: 300_000 }),
              run: async (sandbox: CordonSandbox) => {
                connectMs.push(await worker.connectAndExec(runtime, sandbox.id))
              },
              cleanup: (sandbox: CordonSandbox) => sandbox.destroy(),
            },
            {
              name: 'cold create to first exec',
              prepare: async (): Promise<{ sandbox?: CordonSandbox }> => ({}),
              run: async (holder: { sandbox?: CordonSandbox }) => {
                holder.sandbox = await provider.create()
                const result = await holder.sandbox.exec('true')
                if (result.exitCode !== 0) throw new Error(`true exited ${result.exitCode}`)
              },
              cleanup: async (holder: { sandbox?: CordonSandbox }) => {
                await holder.sandbox?.destroy()
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
        const connect = summarize(connectMs.slice(warmup))
        const cold = summarize(samples.get('cold create to first exec')!)
        tables.push({
          caption: `Reconnect (${runtime})`,
          arms: [
            {
              name: 'cordon `provider.connect(id)` + `exec("true")`, second process',
              summary: connect,
              unit: 'ms',
            },
            { name: 'cordon `provider.create()` + `exec("true")`', summary: cold, unit: 'ms' },
          ],
        })
        comparisons.push({
          scenario: '13 reconnect',
          what: `connect from a second process to first exec / cold create to first exec (${runtime})`,
          ratio: formatRatio(ratio(connect, cold)),
          target: '(report)',
          met: undefined,
        })
      } finally {
        await provider.close()
      }
    }
  } finally {
    await worker.close()
  }
  return {
    id: 'reconnect',
    title: '13. Connect from a second process to first exec',
    method: `Per runtime (runc, then gVisor): ${warmup} warm-up + ${iterations} measured rounds per arm, round-robin. Connect arm: this process creates a detached sandbox (untimed); a second Node process, already running, connects to it by id (credential from the default credential store), runs \`true\`, and times that itself. Cold arm: \`provider.create()\` then \`exec('true')\` in this process, the bench image, deny-all.`,
    tables,
    comparisons,
    notes: [
      "Under runc the second process dials the agent through the container root (no engine call past one inspect); under gVisor it dials the agent's host-backed socket (no engine call past one inspect; a relay with one engine exec where the sandbox has none).",
    ],
    sections: [],
  }
}
