import type { Summary } from './stats.js'

/** One arm's measured samples, summarized. */
export interface ArmResult {
  readonly name: string
  readonly summary: Summary
  /** Unit of `summary`; `ms` unless the scenario says otherwise. */
  readonly unit: string
  /** Extra columns (throughput, memory), already formatted. */
  readonly extra?: Readonly<Record<string, string>>
}

/** One row of the main table: a ratio, its target and whether it was met. */
export interface Comparison {
  readonly scenario: string
  readonly what: string
  readonly ratio: string
  readonly target: string
  /** `undefined` for a row that only reports (no target). */
  readonly met: boolean | undefined
}

export interface ScenarioResult {
  readonly id: string
  readonly title: string
  /** How it was measured: iterations, warm-ups, what is timed. */
  readonly method: string
  readonly tables: ReadonlyArray<{ readonly caption: string; readonly arms: readonly ArmResult[] }>
  readonly comparisons: readonly Comparison[]
  readonly notes: readonly string[]
  /** Further markdown (profiles), written as is. */
  readonly sections: readonly string[]
  /** One-minute load average when the scenario started and ended (set by main). */
  readonly load?: string
  /** Wall time of the whole scenario, set-up included (set by main). */
  readonly seconds?: number
}

export interface ScenarioOptions {
  /** Fewer iterations, for iterating on the bench itself. */
  readonly quick: boolean
  readonly log: (line: string) => void
}

export type Scenario = (options: ScenarioOptions) => Promise<ScenarioResult>
