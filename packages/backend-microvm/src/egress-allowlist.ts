import { type EgressPolicy, SandboxAbortedError } from '@cordon/core'
import { askResolver } from '@cordon/core/backend'

/**
 * Encodes an egress policy as the control plane's `egressAllowlist`:
 *
 * - `allow-all`: omitted (no restriction);
 * - `deny-all`: `[]` (no network at all);
 * - `static`: the listed hosts;
 * - `resolver`: what the resolver answers now, asked once per create and
 *   judged by core's one rule (`askResolver`): an answer with one invalid
 *   entry, a resolver that throws, and one that overruns
 *   `DEFAULT_RESOLVER_TIMEOUT_MS`, all send `[]` (deny everything).
 *
 * `onRefused` hears why a resolver's answer was refused. The orchestrator
 * enforces the list; one that cannot must refuse the create with
 * `control-refused` rather than accept it.
 */
export async function encodeEgressAllowlist(
  policy: EgressPolicy,
  signal: AbortSignal,
  onRefused: (problem: string) => void = () => {},
): Promise<readonly string[] | undefined> {
  switch (policy.kind) {
    case 'allow-all':
      return undefined
    case 'deny-all':
      return []
    case 'static':
      return [...policy.allowedHosts]
    case 'resolver': {
      const answer = await askResolver(policy.resolve)
      if (signal.aborted) throw new SandboxAbortedError('create', { cause: signal.reason })
      if (answer.ok) return [...answer.allowedHosts]
      onRefused(answer.problem)
      return []
    }
  }
}
