import type { ACIStandbyPoolBackendConfig, SandboxBackendConfig } from './config.js'
import type { EgressPolicy } from './egress-policy.js'
import { SandboxControlRefusedError } from './errors.js'
import type { SandboxBackendName } from './provider-config.js'

/**
 * The egress policies a backend cannot enforce with the config it was given,
 * known from the config alone. The provider checks its `defaultEgress` with
 * this at construction, so a host learns at once rather than at its first
 * `create()`; the backend checks each per-call policy with the same rule.
 * (What only the remote side can judge, such as the microVM orchestrator's
 * answer, is refused by that backend when it answers.)
 */
export function egressRefusal(
  backendName: SandboxBackendName,
  backend: SandboxBackendConfig,
  policy: EgressPolicy,
): SandboxControlRefusedError | undefined {
  const control = `egress.${policy.kind}`
  const refuse = (reason: string) => new SandboxControlRefusedError(control, backendName, reason)
  const proxied = policy.kind !== 'deny-all'
  switch (backendName) {
    case 'container:aci-standby-pool': {
      const config = backend as ACIStandbyPoolBackendConfig
      if (proxied) {
        return refuse(
          'a claimed container group keeps the network of its pool and no egress gateway can be placed in its path; only deny-all, enforced by the subnet, is possible',
        )
      }
      if (!config.subnetId) {
        return refuse(
          'without a subnetId the group has a public address and reaches the internet directly; deny-all needs a subnet whose network security group denies outbound traffic',
        )
      }
      return undefined
    }
    default:
      return undefined
  }
}
