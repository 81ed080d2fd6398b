/**
 * The agent's loader (bundled to dist/cordon-agent-loader.cjs): starts the
 * agent's CommonJS bundle from a V8 code cache made beforehand.
 *
 * Why: V8 compiles a function the first time it is called, and each such
 * compile reads the monotonic clock four or five times (V8's compile timers
 * run whether anything reads them or not). Node's own modules and the
 * agent's bundle make hundreds of such compiles before the agent answers
 * its first command. That is cheap where reading the clock is, through the
 * kernel's vDSO. Inside a gVisor sandbox it is not during the sandbox's
 * first second: until runsc has calibrated its clock (about one second after
 * the sandbox boots, its debug log's `CalibratedClock(Monotonic): ready`)
 * its vDSO passes every clock read to the sentry as a system call, and under
 * the ptrace platform each one is a round trip between two host processes.
 * Traced with runsc's `--strace` on one create: about 4,300 `clock_gettime`
 * calls between the agent's start and its first command's exit report, and
 * none after the clock was ready. That second is exactly when a sandbox's
 * agent starts (bench/misses.md, issue 30).
 *
 * A code cache holds compiled functions: the agent's bundle compiled from
 * one (made after a warm-up, so it holds what the agent runs at start)
 * spares those compiles. V8 checks a cache before using it (its V8 version,
 * its flags, the source's length) and compiles from source when it does
 * not match; the cache only ever changes how soon the same program runs.
 *
 *   node cordon-agent-loader.cjs <bundle.cjs> [arguments]
 *
 * compiles `<bundle.cjs>` with `<bundle.cjs>.cache` if there is one, and runs
 * it as Node's CommonJS loader would, its `process.argv` as if it had been
 * started itself (`node <bundle.cjs> [arguments]`). With
 * `CORDON_AGENT_CODE_CACHE_OUT` set (by `makeAgentCodeCache`, never by a
 * backend for a sandbox), it writes a cache of everything compiled so far to
 * that path when the process exits.
 *
 * The code cache holds the agent's functions, not Node's own modules, which
 * the agent compiles as it first uses them. A startup snapshot of this
 * loader holds those too (makeAgentSnapshot; snapshot-warm-up.ts says how
 * and why):
 *
 *   node --snapshot-blob <blob> <bundle.cjs> [arguments]
 *
 * starts Node from the snapshot, and the snapshot's main function loads the
 * bundle exactly as above.
 */
import { readFileSync, writeFileSync } from 'node:fs'
import { dirname, resolve } from 'node:path'
import { startupSnapshot } from 'node:v8'
import {
  CODE_CACHE_OUT_VARIABLE,
  recordCodeCacheUse,
  recordStartedFromSnapshot,
} from './code-cache-use.js'
import { warmUpNodeForSnapshot } from './snapshot-warm-up.js'

type CommonJsWrapper = (
  exports: unknown,
  require: NodeJS.Require,
  module: { exports: unknown },
  filename: string,
  dirname: string,
) => void

/**
 * Started as a script, `node <loader> <bundle.cjs> [arguments]`; from a
 * snapshot of the loader, `node --snapshot-blob <blob> <bundle.cjs>
 * [arguments]`, whose `process.argv` already reads as `node <bundle.cjs>` would.
 */
function load(fromSnapshot: boolean): void {
  const named = process.argv[fromSnapshot ? 1 : 2]
  if (!named) {
    process.stderr.write(
      fromSnapshot
        ? 'usage: node --snapshot-blob <blob> <bundle.cjs> [arguments]\n'
        : 'usage: cordon-agent-loader.cjs <bundle.cjs> [arguments]\n',
    )
    process.exit(2)
  }
  // As Node takes a script's path: relative to the working directory.
  const bundle = resolve(named)
  // Loaded here, not at the top: Node does not vouch for node:vm and
  // node:module in a snapshot's builder, so a snapshot holds neither.
  const { Script } = process.getBuiltinModule('node:vm')
  const { createRequire } = process.getBuiltinModule('node:module')
  // A first line `#!...` is not JavaScript inside a function; `//` keeps its length,
  // which is what V8 compares against a cache.
  const source = readFileSync(bundle, 'utf8').replace(/^#!/, '//')
  let cachedData: Buffer | undefined
  try {
    cachedData = readFileSync(`${bundle}.cache`)
  } catch {
    // No cache beside it: compiled from source, as `node <bundle>` would.
  }
  // The wrapper Node's CommonJS loader puts around a module.
  const script = new Script(
    `(function (exports, require, module, __filename, __dirname) { ${source}\n});`,
    { filename: bundle, ...(cachedData ? { cachedData } : {}) },
  )
  const use = cachedData === undefined ? 'none' : script.cachedDataRejected ? 'rejected' : 'used'
  recordCodeCacheUse(use)
  if (use === 'rejected')
    process.stderr.write(
      `cordon-agent: ${bundle}.cache was made by another Node or with other V8 flags; compiled from source\n`,
    )
  const out = process.env[CODE_CACHE_OUT_VARIABLE]
  if (out) {
    // Not passed on: the agent's own environment is what it reads its configuration from.
    delete process.env[CODE_CACHE_OUT_VARIABLE]
    process.on('exit', () => writeFileSync(out, script.createCachedData()))
  }
  if (!fromSnapshot) process.argv.splice(1, 1)
  const run = script.runInThisContext() as CommonJsWrapper
  const module = { exports: {} }
  run.call(module.exports, module.exports, createRequire(bundle), module, bundle, dirname(bundle))
}

// Building a startup snapshot (makeAgentSnapshot): Node's modules are run
// through first (snapshot-warm-up.ts), and each start from the snapshot loads
// the bundle as a start from the script does.
if (startupSnapshot.isBuildingSnapshot()) {
  warmUpNodeForSnapshot()
  startupSnapshot.setDeserializeMainFunction(() => {
    recordStartedFromSnapshot()
    load(true)
  })
} else {
  load(false)
}
