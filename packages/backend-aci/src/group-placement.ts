import { SandboxControlRefusedError } from '@cordon/core'
import { BACKEND_NAME } from './aci-defaults.js'

/**
 * Checks a claimed group is where deny-all was promised: attached to the
 * configured subnet, with no public address. Returns the refusal if not.
 * ACI should never hand out such a group for a claim that named the subnet;
 * this catches a pool whose profile or subnet is not what the host was told.
 */
export function placementRefusal(
  groupName: string,
  group: unknown,
  subnetId: string,
): SandboxControlRefusedError | undefined {
  const properties = (
    group as { properties?: { ipAddress?: { type?: unknown }; subnetIds?: unknown } } | undefined
  )?.properties
  const subnets = Array.isArray(properties?.subnetIds)
    ? (properties.subnetIds as Array<{ id?: unknown }>)
    : []
  const inSubnet = subnets.some(
    (subnet) => typeof subnet.id === 'string' && subnet.id.toLowerCase() === subnetId.toLowerCase(),
  )
  const isPublic =
    typeof properties?.ipAddress?.type === 'string' && /^public$/i.test(properties.ipAddress.type)
  if (inSubnet && !isPublic) return undefined
  return new SandboxControlRefusedError(
    'egress.deny-all',
    BACKEND_NAME,
    `the claimed group ${groupName} ${isPublic ? 'has a public address' : 'is not in the configured subnet'}, so its egress is not the subnet's to deny; check the pool's profile and subnet`,
  )
}
