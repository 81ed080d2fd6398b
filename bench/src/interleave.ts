import { performance } from 'node:perf_hooks'

/**
 * One side of a comparison. `run` is the timed part; `prepare` and `cleanup`
 * run around it untimed (removing a container, refilling a pool), so the next
 * arm starts from the same quiet state.
 */
export interface Arm<Context = unknown> {
  readonly name: string
  readonly prepare?: () => Promise<Context>
  readonly run: (context: Context) => Promise<void>
  readonly cleanup?: (context: Context) => Promise<void>
  /**
   * Caps this arm's rounds below the run's (for an arm so slow that the full
   * count would not fit the time budget). It then runs in the last `warmup`
   * warm-up rounds and the first `iterations` measured rounds, still
   * interleaved with the others.
   */
  readonly rounds?: { readonly warmup: number; readonly iterations: number }
}

export interface InterleaveOptions {
  /** Rounds run first and thrown away (first-call costs, caches, JIT). */
  readonly warmup: number
  readonly iterations: number
  /** Called after every run, warm-ups included, with the arm, round and elapsed ms. */
  readonly onRun?: (arm: string, round: number, ms: number, warmup: boolean) => void
}

/**
 * What one timed run made, so that its arm's `cleanup` can remove it after
 * the clock stops: tearing down is not part of what a scenario measures.
 */
export interface Holder<T> {
  value?: T
}

/**
 * Runs the arms round-robin, so a slow drift of the machine (another process,
 * page cache, engine state) lands on every arm alike instead of on whichever
 * ran last; and each round starts one arm later (A B C, B C A, C A B, ...),
 * so no arm always runs right after the same one, in the wake of its cleanup
 * (a removal the engine finishes after its call returns, a CLI process
 * exiting). Returns each arm's measured samples in milliseconds, warm-up
 * rounds excluded.
 */
export async function interleave(
  // biome-ignore lint/suspicious/noExplicitAny: each arm has its own context type
  arms: readonly Arm<any>[],
  options: InterleaveOptions,
): Promise<Map<string, number[]>> {
  const samples = new Map<string, number[]>(arms.map((arm) => [arm.name, []]))
  const rounds = options.warmup + options.iterations
  for (let round = 0; round < rounds; round++) {
    const warmup = round < options.warmup
    const order = [...arms.slice(round % arms.length), ...arms.slice(0, round % arms.length)]
    for (const arm of order) {
      if (arm.rounds) {
        const skip = warmup
          ? round < options.warmup - arm.rounds.warmup
          : round - options.warmup >= arm.rounds.iterations
        if (skip) continue
      }
      const context = arm.prepare ? await arm.prepare() : undefined
      let ms: number
      try {
        const started = performance.now()
        await arm.run(context)
        ms = performance.now() - started
      } finally {
        if (arm.cleanup) await arm.cleanup(context)
      }
      options.onRun?.(arm.name, round, ms, warmup)
      if (!warmup) samples.get(arm.name)!.push(ms)
    }
  }
  return samples
}
