import type { ArmResponse } from './arm-client.js'

/** Instance counts of a standby pool by state (`Running`, `Creating`, ...). */
export type PoolInstanceCounts = Readonly<Record<string, number>>

/**
 * Reads the counts out of a `standbyContainerGroupPools/{pool}/runtimeViews/latest`
 * document (summed over its summaries, which are per zone when the pool is zonal).
 */
export function parsePoolRuntimeView(body: unknown): PoolInstanceCounts {
  const counts: Record<string, number> = {}
  const summaries = (body as { properties?: { instanceCountSummary?: unknown } } | undefined)
    ?.properties?.instanceCountSummary
  for (const summary of Array.isArray(summaries) ? summaries : []) {
    const byState = (summary as { instanceCountsByState?: unknown }).instanceCountsByState
    for (const entry of Array.isArray(byState) ? byState : []) {
      const { state, count } = entry as { state?: unknown; count?: unknown }
      if (typeof state === 'string' && typeof count === 'number')
        counts[state] = (counts[state] ?? 0) + count
    }
  }
  return counts
}

export function describePoolCounts(counts: PoolInstanceCounts): string {
  const entries = Object.entries(counts)
  return entries.length === 0
    ? 'no instances reported'
    : entries.map(([state, count]) => `${count} ${state.toLowerCase()}`).join(', ')
}

/**
 * True when a claim was refused because the pool had no ready container
 * group (`StandbyPoolReservationFailed` / `InsufficientContainerGroups`),
 * which ARM reports as a 400 with those codes in the code, details or message.
 */
export function isPoolExhausted(response: ArmResponse): boolean {
  if (response.status !== 400 && response.status !== 409) return false
  const text = JSON.stringify((response.body as { error?: unknown } | undefined)?.error ?? '')
  // ARM has been seen spelling the code `StandyPoolReservationFailed`.
  return /InsufficientContainerGroups|Stand(?:by|y)PoolReservationFailed/i.test(text)
}
