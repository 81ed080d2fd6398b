/**
 * A signal that aborts with a `TimeoutError` `DOMException` once `ms` have
 * passed, or as soon as any of `signals` aborts (with its reason).
 *
 * Use this, not `AbortSignal.any([signal, AbortSignal.timeout(ms)])`: on
 * Node 20 a composite signal holds its sources weakly, so a timeout signal
 * that nothing else holds is collected at the next garbage collection, its
 * timer goes with it, and the limit never falls (seen in CI: a background
 * sweep's time limit that did not fire). Here the pending timer holds the
 * controller it aborts. The timer does not keep the process alive and is
 * cleared once the signal aborts for any reason.
 */
export function timeLimit(
  ms: number,
  ...signals: readonly (AbortSignal | undefined)[]
): AbortSignal {
  const limit = new AbortController()
  const timer = setTimeout(
    () => limit.abort(new DOMException(`The operation timed out after ${ms} ms.`, 'TimeoutError')),
    ms,
  )
  timer.unref?.()
  const sources = signals.filter((signal): signal is AbortSignal => signal !== undefined)
  const signal = sources.length ? AbortSignal.any([...sources, limit.signal]) : limit.signal
  if (signal.aborted) clearTimeout(timer)
  else signal.addEventListener('abort', () => clearTimeout(timer), { once: true })
  return signal
}
