import { type EgressPolicy, SandboxAbortedError } from '@cordon/core'
import { parseAllowlistEntry } from '@cordon/core/backend'

/**
 * Encodes an egress policy as the control plane's `egressAllowlist`:
 *
 * - `allow-all`: omitted (no restriction);
 * - `deny-all`: `[]` (no network at all);
 * - `static`: the listed hosts;
 * - `resolver`: what the resolver returns now, asked once per create. A
 *   resolver that throws, or returns entries that are not valid allowlist
 *   entries, denies everything, as core's policy contract says.
 *
 * The orchestrator enforces the list; one that cannot must refuse the create
 * with `control-refused` rather than accept it.
 */
export async function encodeEgressAllowlist(
  policy: EgressPolicy,
  signal: AbortSignal,
): Promise<readonly string[] | undefined> {
  switch (policy.kind) {
    case 'allow-all':
      return undefined
    case 'deny-all':
      return []
    case 'static':
      return [...policy.allowedHosts]
    case 'resolver': {
      let hosts: readonly string[]
      try {
        hosts = await policy.resolve()
      } catch {
        return []
      }
      if (signal.aborted) throw new SandboxAbortedError('create', { cause: signal.reason })
      if (
        !Array.isArray(hosts) ||
        hosts.some((entry) => typeof entry !== 'string' || parseAllowlistEntry(entry) === undefined)
      ) {
        return []
      }
      return [...hosts]
    }
  }
}
