import { parseAllowlistEntry } from './host-allowlist.js'

/**
 * The one rule for what a `resolver` egress policy's `resolve()` answer
 * means. Every enforcer asks through {@link askResolver} (the egress proxy,
 * a backend's gateway registration, a control plane's allowlist), so the same answer allows the same hosts
 * everywhere:
 *
 * - an array of valid allowlist entries is enforced exactly as returned
 *   (an empty array allows nothing);
 * - an answer that is not an array of strings, or holds even one entry
 *   that is not a valid allowlist entry, denies everything: a bad entry
 *   means the host's resolver is broken or compromised, and enforcing the
 *   rest would guess at what it meant (a dropped `*.example.com` could be the
 *   only host the sandbox needed, a kept one never matches anything);
 * - a resolver that throws, rejects or does not answer within its budget
 *   ({@link DEFAULT_RESOLVER_TIMEOUT_MS} unless the enforcer is configured
 *   otherwise) denies everything.
 *
 * A refusal is an answer, never an exception, so an enforcer cannot forget
 * to handle it; the problem text names the offending entry for the host's
 * events.
 */

/** Either the allowlist to enforce, or a refusal that denies everything. */
export type ResolverAnswer =
  | { readonly ok: true; readonly allowedHosts: readonly string[] }
  | {
      readonly ok: false
      /** Why everything is denied, naming the offending entry when there is one. */
      readonly problem: string
      readonly badEntry?: string
    }

/** Default budget of one `resolve()` call, the same for every enforcer. */
export const DEFAULT_RESOLVER_TIMEOUT_MS = 5_000

/** Judges an answer already in hand by the rule above (the budget is {@link askResolver}'s). */
export function judgeResolverAnswer(answer: unknown): ResolverAnswer {
  if (!Array.isArray(answer)) {
    return { ok: false, problem: 'resolve() did not return an array of host names' }
  }
  for (const entry of answer) {
    if (typeof entry !== 'string' || parseAllowlistEntry(entry) === undefined) {
      const shown = typeof entry === 'string' ? entry : String(entry)
      return {
        ok: false,
        problem: `resolve() returned "${shown}", which is not a valid allowlist entry; everything is denied until it returns only valid entries`,
        badEntry: shown,
      }
    }
  }
  return { ok: true, allowedHosts: [...answer] }
}

/**
 * Calls a resolver with a budget and judges the answer. A resolver that
 * throws, rejects or overruns denies everything.
 */
export async function askResolver(
  resolve: () => Promise<readonly string[]>,
  timeoutMs: number = DEFAULT_RESOLVER_TIMEOUT_MS,
): Promise<ResolverAnswer> {
  let timer: ReturnType<typeof setTimeout> | undefined
  try {
    const answer = await Promise.race([
      Promise.resolve().then(resolve),
      new Promise<never>((_, reject) => {
        timer = setTimeout(
          () => reject(new Error(`resolve() did not answer within ${timeoutMs} ms`)),
          timeoutMs,
        )
      }),
    ])
    return judgeResolverAnswer(answer)
  } catch (error) {
    return {
      ok: false,
      problem: `resolve() failed: ${(error as Error)?.message ?? String(error)}; everything is denied`,
    }
  } finally {
    if (timer) clearTimeout(timer)
  }
}
