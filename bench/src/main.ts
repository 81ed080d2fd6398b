/**
 * `pnpm bench` (or `node dist/main.js [scenario ...] [--quick] [--verbose] [--out FILE] [--merge]`;
 * `node dist/main.js --render [--out FILE.md] [--merge]` writes the report again from dist/FILE.json).
 *
 * `--merge` keeps the report at `--out` and replaces only the scenarios run
 * (their ratio rows and sections; the others' stay as they were), saying in
 * it which run they came from; its measurements are kept in dist/FILE.merge.json.
 *
 * Runs the scenarios in order, each side by side with its peers, and writes
 * RESULTS.md. Every container and volume made along the way carries the
 * `cordon-test.run=bench` label and is removed at the end, after a failure and
 * on Ctrl-C too.
 */
import { readFile, writeFile } from 'node:fs/promises'
import { loadavg } from 'node:os'
import { basename } from 'node:path'
import { performance } from 'node:perf_hooks'
import { fileURLToPath } from 'node:url'
import { GVISOR } from './bench-runtime.js'
import { checkEngine, removeBenchResources } from './engine.js'
import { collectMachineInfo, mergeResults, type RunRecord, writeResults } from './report.js'
import type { Scenario, ScenarioResult } from './scenario.js'

const SCENARIOS: Record<string, () => Promise<Scenario>> = {
  'create-to-first-exec': async () => (await import('./create-to-first-exec.js')).createToFirstExec,
  'warm-pool-claim': async () => (await import('./warm-pool-claim.js')).warmPoolClaim,
  'exec-round-trip': async () => (await import('./exec-round-trip.js')).execRoundTrip,
  'file-transfer': async () => (await import('./file-transfer.js')).fileTransfer,
  'egress-proxy': async () => (await import('./egress-proxy.js')).egressProxy,
  'concurrent-create': async () => (await import('./concurrent-create.js')).concurrentCreate,
  'small-files': async () => (await import('./small-files.js')).smallFiles,
  'exec-soak': async () => (await import('./exec-soak.js')).execSoak,
  density: async () => (await import('./density.js')).density,
  'agent-sdk-task': async () => (await import('./agent-sdk-task.js')).agentSdkTask,
  'agent-start': async () => (await import('./agent-start.js')).agentStart,
  'pause-resume': async () => (await import('./pause-resume.js')).pauseResume,
  'snapshot-fork': async () => (await import('./snapshot-fork.js')).snapshotFork,
  reconnect: async () => (await import('./reconnect.js')).reconnect,
  'memory-restore': async () => (await import('./memory-restore.js')).memoryRestore,
  // Issue 30: the same scenarios, every container under gVisor (runtime 'runsc').
  'create-to-first-exec-gvisor': async () =>
    (await import('./create-to-first-exec.js')).createToFirstExecScenario(GVISOR),
  'warm-pool-claim-gvisor': async () =>
    (await import('./warm-pool-claim.js')).warmPoolClaimScenario(GVISOR),
  'exec-round-trip-gvisor': async () =>
    (await import('./exec-round-trip.js')).execRoundTripScenario(GVISOR),
  'file-transfer-gvisor': async () =>
    (await import('./file-transfer.js')).fileTransferScenario(GVISOR),
  'gvisor-floors': async () => (await import('./gvisor-floors.js')).gvisorFloors,
}

function parseArgs(argv: readonly string[]): {
  scenarios: string[]
  quick: boolean
  out: string
  verbose: boolean
  merge: boolean
} {
  const scenarios: string[] = []
  let quick = false
  let verbose = false
  let merge = false
  let out = fileURLToPath(new URL('../RESULTS.md', import.meta.url))
  for (let index = 0; index < argv.length; index++) {
    const arg = argv[index]!
    if (arg === '--quick') quick = true
    else if (arg === '--verbose') verbose = true
    else if (arg === '--merge') merge = true
    else if (arg === '--out') out = argv[++index] ?? out
    else if (arg in SCENARIOS) scenarios.push(arg)
    else
      throw new Error(
        `unknown argument ${arg}; scenarios: ${Object.keys(SCENARIOS).join(', ')}; flags: --quick, --verbose, --out FILE, --merge`,
      )
  }
  return {
    scenarios: scenarios.length > 0 ? scenarios : Object.keys(SCENARIOS),
    quick,
    out,
    verbose,
    merge,
  }
}

async function main(): Promise<void> {
  const args = parseArgs(process.argv.slice(2))
  const say = (line: string) => process.stderr.write(`${line}\n`)
  await checkEngine()
  const leftovers = await removeBenchResources()
  if (leftovers.containers + leftovers.volumes > 0)
    say(
      `removed leftovers of an earlier run: ${leftovers.containers} containers, ${leftovers.volumes} volumes`,
    )
  const onSignal = (signal: NodeJS.Signals) => {
    say(`${signal}: removing bench containers and volumes`)
    void removeBenchResources().finally(() => process.exit(130))
  }
  process.once('SIGINT', onSignal)
  process.once('SIGTERM', onSignal)

  const machineBefore = await collectMachineInfo()
  const started = performance.now()
  const results: ScenarioResult[] = []
  try {
    for (const name of args.scenarios) {
      const scenarioStarted = performance.now()
      say(`== ${name}`)
      const scenario = await SCENARIOS[name]!()
      const loadBefore = loadavg()[0]!.toFixed(2)
      const result = await scenario({ quick: args.quick, log: args.verbose ? say : () => {} })
      const seconds = (performance.now() - scenarioStarted) / 1000
      results.push({ ...result, seconds, load: `${loadBefore} → ${loadavg()[0]!.toFixed(2)}` })
      say(`   ${seconds.toFixed(1)} s, load ${results.at(-1)!.load}`)
      for (const row of results.at(-1)!.comparisons) {
        say(
          `   ${row.what}: ${row.ratio} (target ${row.target})${row.met === undefined ? '' : row.met ? ' met' : ' MISSED'}`,
        )
      }
    }
  } finally {
    const removed = await removeBenchResources()
    if (removed.containers + removed.volumes > 0)
      say(`removed ${removed.containers} containers and ${removed.volumes} volumes left by the run`)
  }
  const totalSeconds = (performance.now() - started) / 1000
  const machineAfter = await collectMachineInfo()
  const run: RunRecord = {
    results,
    machineBefore,
    machineAfter,
    totalSeconds,
    command: `pnpm bench${args.quick || args.scenarios.length < Object.keys(SCENARIOS).length ? ` (this run: node dist/main.js ${process.argv.slice(2).join(' ')})` : ''}`,
  }
  // Kept so the report can be written again (`--render`) after misses.md is
  // edited, from the same measurements.
  await writeFile(recordPath(args.out, args.merge), `${JSON.stringify(run, null, 2)}\n`)
  await (args.merge ? mergeResults : writeResults)(args.out, run)
  say(`wrote ${args.out} (${totalSeconds.toFixed(0)} s)`)
}

/**
 * The measurements behind a report, kept in dist/ (build output: not linted,
 * not committed): RESULTS.md → dist/RESULTS.json, or dist/RESULTS.merge.json
 * for a merged run (so rendering the full report again never writes a
 * partial run over it).
 */
function recordPath(out: string, merge: boolean): string {
  const base = basename(out).replace(/\.md$/, '')
  return fileURLToPath(new URL(`${base}${merge ? '.merge' : ''}.json`, import.meta.url))
}

/** `--render`: writes the report again from the last run's measurements (merged again with `--merge`). */
async function render(out: string, merge: boolean): Promise<void> {
  const run = JSON.parse(await readFile(recordPath(out, merge), 'utf8')) as RunRecord
  await (merge ? mergeResults : writeResults)(out, run)
  process.stderr.write(`wrote ${out} from ${recordPath(out, merge)}\n`)
}

const renderArgs = () => parseArgs(process.argv.slice(2).filter((arg) => arg !== '--render'))
const entry = process.argv.includes('--render')
  ? render(renderArgs().out, renderArgs().merge)
  : main()
entry.then(
  () => process.exit(0),
  async (error: unknown) => {
    process.stderr.write(
      `bench failed: ${error instanceof Error ? (error.stack ?? error.message) : String(error)}\n`,
    )
    await removeBenchResources().catch(() => {})
    process.exit(1)
  },
)
