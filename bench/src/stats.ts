/** Order statistics of one arm's measured samples (milliseconds unless a scenario says otherwise). */
export interface Summary {
  readonly n: number
  readonly min: number
  readonly median: number
  readonly p95: number
  readonly max: number
}

/** Linear interpolation between closest ranks (the usual "type 7" quantile). */
export function quantile(sorted: readonly number[], q: number): number {
  if (sorted.length === 0) return Number.NaN
  const position = (sorted.length - 1) * q
  const below = Math.floor(position)
  const above = Math.ceil(position)
  const low = sorted[below]!
  const high = sorted[above]!
  return low + (high - low) * (position - below)
}

export function summarize(samples: readonly number[]): Summary {
  const sorted = [...samples].sort((a, b) => a - b)
  return {
    n: sorted.length,
    min: sorted[0] ?? Number.NaN,
    median: quantile(sorted, 0.5),
    p95: quantile(sorted, 0.95),
    max: sorted[sorted.length - 1] ?? Number.NaN,
  }
}

/** `a / b` of the medians: below 1 means `a` took less time (or, for throughput, moved less). */
export function ratio(a: Summary, b: Summary): number {
  return a.median / b.median
}

export function formatMs(ms: number): string {
  if (!Number.isFinite(ms)) return 'n/a'
  if (ms >= 1000) return `${(ms / 1000).toFixed(2)} s`
  if (ms >= 100) return `${ms.toFixed(0)} ms`
  if (ms >= 10) return `${ms.toFixed(1)} ms`
  return `${ms.toFixed(2)} ms`
}

export function formatRatio(value: number): string {
  return Number.isFinite(value) ? `${value.toFixed(2)}x` : 'n/a'
}
