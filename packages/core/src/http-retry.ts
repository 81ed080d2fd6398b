/**
 * When to try an HTTP request to a control plane again and how long to wait,
 * for every backend's `JsonHttpClient`. Throttling (429) and the
 * transient server errors are retried; the wait is the server's `Retry-After`
 * when it sends one, otherwise an exponential back-off with jitter so that
 * many hosts throttled at once do not come back in step.
 *
 * Written here rather than taken from a retry library: a control plane's
 * `Retry-After` must decide the wait, and the wait must end the moment the
 * caller's signal fires. p-retry and exponential-backoff take no
 * server-given delay, cockatiel 3 does not abort its wait, and the releases
 * that fix either need Node 22 (cordon supports 20.18).
 */
const TRANSIENT_STATUSES = new Set([408, 429, 500, 502, 503, 504])
const FIRST_BACKOFF_MS = 500
const MAX_BACKOFF_MS = 8_000
/** A `Retry-After` beyond this is capped: the caller's deadline decides, not an hour-long hint. */
const MAX_RETRY_AFTER_MS = 60_000

/** Statuses that say "not now" rather than "no": worth another attempt. */
export function isTransientStatus(status: number): boolean {
  return TRANSIENT_STATUSES.has(status)
}

/**
 * `Retry-After` in milliseconds: delay-seconds or an HTTP date. Undefined
 * when absent or unreadable.
 */
export function parseRetryAfter(value: string | undefined, now = Date.now()): number | undefined {
  if (value === undefined) return undefined
  const text = value.trim()
  if (/^\d+$/.test(text)) return Math.min(Number(text) * 1000, MAX_RETRY_AFTER_MS)
  const date = Date.parse(text)
  if (Number.isNaN(date)) return undefined
  return Math.min(Math.max(0, date - now), MAX_RETRY_AFTER_MS)
}

/** How long to wait before attempt `attempt + 1` (attempts count from 1). */
export function retryDelayMs(
  attempt: number,
  retryAfter: string | undefined,
  random = Math.random,
): number {
  const hinted = parseRetryAfter(retryAfter)
  if (hinted !== undefined) return hinted
  const ceiling = Math.min(MAX_BACKOFF_MS, FIRST_BACKOFF_MS * 2 ** (attempt - 1))
  // Full jitter on the upper half: never less than half the back-off.
  return Math.round(ceiling / 2 + (random() * ceiling) / 2)
}
