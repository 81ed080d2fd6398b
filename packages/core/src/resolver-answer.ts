import { parseAllowlistEntry } from './host-allowlist.js'

/**
 * What a `resolver` egress policy's closure answered, judged once for every
 * enforcer (the Docker gateway, the microVM control plane, the egress proxy):
 * either the allowlist to enforce, or a refusal that denies everything.
 */
export type ResolverAnswer =
  | { readonly ok: true; readonly allowedHosts: readonly string[] }
  | {
      readonly ok: false
      /** Why everything is denied, naming the offending entry when there is one. */
      readonly problem: string
      readonly badEntry?: string
    }

/** Default budget of one `resolve()` call. */
export const DEFAULT_RESOLVER_TIMEOUT_MS = 5_000

/**
 * Judges a resolver's answer. Egress is a security boundary, so this fails
 * closed: an answer that is not an array of strings, or that holds one
 * entry that is not a valid allowlist entry, denies everything (rather than
 * enforcing the rest and guessing what the host meant by the bad one).
 */
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
