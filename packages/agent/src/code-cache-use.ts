/**
 * How the agent's program was compiled when it started, as its loader
 * (code-cache-loader.ts) found it: from a V8 code cache V8 accepted
 * (`used`), from source because V8 refused the cache it was given
 * (`rejected`: another Node or other V8 flags made it), or from source with
 * no cache at all (`none`). Undefined when the program was started without
 * the loader. The agent reports it in its health answer.
 *
 * The loader and the program are two bundles in one process; they share
 * this one value through a registered symbol on the global object.
 */
export type CodeCacheUse = 'used' | 'rejected' | 'none'

/**
 * Set for the loader by makeAgentCodeCache: where it writes a code cache of
 * the program when the process exits. The loader removes it from the
 * environment before the program starts.
 */
export const CODE_CACHE_OUT_VARIABLE = 'CORDON_AGENT_CODE_CACHE_OUT'

const KEY = Symbol.for('cordon.agent.codeCacheUse')

export function recordCodeCacheUse(use: CodeCacheUse): void {
  ;(globalThis as Record<symbol, unknown>)[KEY] = use
}

export function codeCacheUse(): CodeCacheUse | undefined {
  const use = (globalThis as Record<symbol, unknown>)[KEY]
  return use === 'used' || use === 'rejected' || use === 'none' ? use : undefined
}

const SNAPSHOT_KEY = Symbol.for('cordon.agent.startedFromSnapshot')

/** The loader started from a startup snapshot of itself (makeAgentSnapshot). */
export function recordStartedFromSnapshot(): void {
  ;(globalThis as Record<symbol, unknown>)[SNAPSHOT_KEY] = true
}

export function startedFromSnapshot(): boolean {
  return (globalThis as Record<symbol, unknown>)[SNAPSHOT_KEY] === true
}
