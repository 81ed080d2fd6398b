import { HarnessCapabilityUnsupportedError, type HarnessV1NetworkPolicy } from '@ai-sdk/harness'
import type { Sandbox, SandboxNetworkPolicy } from '@cordon/core'
import { SandboxControlRefusedError } from '@cordon/core'

/**
 * Applies a harness network policy with cordon's enforced egress
 * (`Sandbox.setNetworkPolicy`, the gateway's host allowlist). cordon's
 * allowlist is host based and always refuses private, loopback and metadata
 * addresses, so:
 *
 * - `deny-all` becomes an empty allowlist. A sandbox created with cordon's
 *   `deny-all` has no gateway at all and refuses any change; for this policy
 *   that refusal means the policy already holds (nothing can leave).
 * - `custom` with `allowedHosts` becomes that allowlist (cordon validates the
 *   entries: exact names or a leading dot for a domain).
 * - `allow-all` cannot be expressed as an allowlist, and CIDR rules are not
 *   host rules: both are refused with the harness's capability error, as is
 *   any change to a sandbox that cannot change egress after creation (its
 *   backend has no run-time control, or it is detached). The
 *   policy a sandbox starts with is the provider's `egress` option.
 */
export async function applyNetworkPolicy(
  sandbox: Sandbox,
  policy: HarnessV1NetworkPolicy,
): Promise<void> {
  const allowlist = toAllowlist(policy)
  if (!sandbox.setNetworkPolicy) {
    throw new HarnessCapabilityUnsupportedError({
      message:
        'this cordon sandbox cannot change its egress after creation: its backend has no run-time egress control, or the sandbox is detached (a detached sandbox keeps the policy it was created with); choose the policy with the provider’s egress option',
    })
  }
  try {
    await sandbox.setNetworkPolicy(allowlist)
  } catch (error) {
    if (
      policy.mode === 'deny-all' &&
      SandboxControlRefusedError.isInstance(error) &&
      error.control === 'setNetworkPolicy'
    ) {
      return
    }
    if (SandboxControlRefusedError.isInstance(error)) {
      throw new HarnessCapabilityUnsupportedError({ message: error.message, cause: error })
    }
    throw error
  }
}

function toAllowlist(policy: HarnessV1NetworkPolicy): SandboxNetworkPolicy {
  switch (policy.mode) {
    case 'deny-all':
      return { allowedHosts: [] }
    case 'allow-all':
      throw new HarnessCapabilityUnsupportedError({
        message:
          'cordon cannot switch a running sandbox to allow-all (its run-time egress control is a host allowlist); create the sandbox with egress { kind: "allow-all" } or list the hosts',
      })
    case 'custom': {
      if ((policy.allowedCIDRs?.length ?? 0) > 0 || (policy.deniedCIDRs?.length ?? 0) > 0) {
        throw new HarnessCapabilityUnsupportedError({
          message:
            'cordon’s egress allowlist is by host name, not by CIDR (private, loopback and metadata addresses are always refused); use allowedHosts',
        })
      }
      return { allowedHosts: [...(policy.allowedHosts ?? [])] }
    }
  }
}
