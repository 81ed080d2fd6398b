/**
 * The startup clock (`@cordon/agent`'s `launcher/startup-clock.c`): a small
 * library the agent's loader preloads into the agent's Node in a gVisor
 * sandbox. runsc's vDSO makes every clock read a system call until its clock
 * is calibrated, about a second after the sandbox boots, and Node's start
 * reads the clock hundreds of times (V8 times each function it compiles);
 * the library answers most of those reads from the last one, at most about
 * 0.2 ms old, and steps aside for good once a read is fast. Only the agent's
 * process has it (`--preload` is an option of the loader that starts it, not
 * an environment variable its commands would inherit).
 */

/** Where the runtime volume holds it. */
export const STARTUP_CLOCK_FILE = 'lib/cordon-startup-clock.so'

/**
 * Whether a runtime's agents start with it: under gVisor only. Under runc
 * the vDSO answers without a system call from the first read, and the
 * library would only add a call in between.
 */
export function agentUsesStartupClock(runtime: string | undefined): boolean {
  return runtime === 'runsc'
}

/** glibc's loader takes `--preload` from 2.30 on. */
const PRELOAD_SINCE: readonly [number, number] = [2, 30]

/**
 * Whether this host's loader, which the runtime volume carries, takes
 * `--preload`: its glibc is the one this process runs on.
 * `glibcVersion` is for tests; by default it is this process's.
 */
export function loaderTakesPreload(glibcVersion: string | undefined = hostGlibc()): boolean {
  const match = /^(\d+)\.(\d+)/.exec(glibcVersion ?? '')
  if (!match) return false
  const [major, minor] = [Number(match[1]), Number(match[2])]
  return major > PRELOAD_SINCE[0] || (major === PRELOAD_SINCE[0] && minor >= PRELOAD_SINCE[1])
}

function hostGlibc(): string | undefined {
  const report = process.report?.getReport() as
    | { header?: { glibcVersionRuntime?: string } }
    | undefined
  return report?.header?.glibcVersionRuntime
}
