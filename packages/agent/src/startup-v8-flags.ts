import { setFlagsFromString } from 'node:v8'

/**
 * Keeps two kinds of V8 background work off the path of the agent's first
 * answer, on the path of every Docker sandbox's create. A container's agent
 * has one CPU, so a "background" thread's work is time the first answer
 * waits for.
 *
 * - The scheduled young-generation collection. By its first command's answer
 *   a cold agent has allocated about 900 KiB in a 1 MiB young generation
 *   (most of it Node's own start-up and node:net). V8 schedules a collection
 *   as a task once the space is 80% full, and that task ran in the middle of
 *   the first handshake: 3 to 6 ms. While deferred, a collection happens
 *   only when the space is full (V8's own fallback), which start-up does not
 *   reach.
 * - The optimising compiler (TurboFan). The handshake's SHA-256 rounds
 *   (protocol/sha256.ts) are hot enough by their third call for V8 to
 *   optimise them, a 2 to 4 ms compile; the interpreter and the baseline
 *   compiler run them in a quarter of a millisecond.
 * - The baseline compiler (Sparkplug). Each of its batch compiles reads the
 *   clock several times (V8's compile timers), and in a gVisor sandbox's
 *   first second every clock read is a system call (code-cache-loader.ts).
 *   Off until the first connection is served, a gVisor create waited
 *   210-230 ms for its agent against 231-248 ms (three alternating runs of
 *   bench scenario 1); under runc, no difference (bench/misses.md).
 *
 * The defaults come back once the first connection is served: a long-lived
 * agent wants both, and V8's flags also key its code cache, so Node's own
 * modules loaded while they differ compile from source, slower.
 */
let deferred = false

export function deferStartupBackgroundWork(): void {
  setFlagsFromString('--no-minor-gc-task --no-turbofan --no-sparkplug')
  deferred = true
}

export function restoreStartupBackgroundWork(): void {
  if (!deferred) return
  deferred = false
  setFlagsFromString('--minor-gc-task --turbofan --sparkplug')
}
