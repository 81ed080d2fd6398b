import { setFlagsFromString } from 'node:v8'

/**
 * Keeps V8's young-generation collection off the path of the agent's first
 * answer.
 *
 * By its first command's answer a cold agent has allocated about 900 KiB in
 * a 1 MiB young generation (Node's own start-up, node:crypto and node:net
 * are most of it). V8 schedules a collection as a task once the space is
 * 80% full, and that task runs in the middle of the first handshake: 3 to 6
 * ms on this kind of machine, on the path of every Docker sandbox's create.
 * While deferred, a collection happens only when the space is full (V8's
 * own fallback), which start-up does not reach.
 *
 * The default comes back once the first connection is served: V8's flags
 * also key its code cache, so Node's own modules loaded while they differ
 * compile from source, slower.
 */
let deferred = false

export function deferYoungGenerationGc(): void {
  setFlagsFromString('--no-minor-gc-task')
  deferred = true
}

export function restoreYoungGenerationGc(): void {
  if (!deferred) return
  deferred = false
  setFlagsFromString('--minor-gc-task')
}
