import { SandboxControlRefusedError } from '@cordon/core'
import { isTransientStatus } from '@cordon/core/backend'
import { BACKEND_NAME, NETWORK_API_VERSION } from './aci-defaults.js'
import type { ArmClient, ArmResponse } from './arm-client.js'
import { parseSubnetDocument, subnetEgressProblem } from './subnet-egress-check.js'

/** What the subnet's security group says about `deny-all`: undefined when it holds, else why not. */
export type SubnetEgressVerdict = { readonly problem: string | undefined }

/**
 * Reads the subnet and its network security group over ARM and judges
 * whether they keep claimed groups off the internet. The two GETs carry no
 * caller's signal: the read is shared by every create waiting on it, and the
 * client's retries bound it.
 *
 * A read that fails is never taken as "denied". A 401 is the token's fault
 * and surfaces as it does for every request (`ArmAuthorizationError`);
 * throttling or server errors that outlast the retries mean Azure is
 * unavailable; any other answer (403, 404...) refuses `deny-all` naming what
 * could not be read, with ARM's answer as the cause.
 */
export async function readSubnetEgress(
  client: ArmClient,
  subnetId: string,
): Promise<SubnetEgressVerdict> {
  const subnetResponse = await client.send('GET', client.resourceUrl(subnetId, NETWORK_API_VERSION))
  if (subnetResponse.status !== 200)
    throw unreadable(client, subnetResponse, 'read subnet', `the subnet ${subnetId}`)
  const subnet = parseSubnetDocument(subnetId, subnetResponse.body)
  if (subnet.securityGroupId === undefined)
    return { problem: subnetEgressProblem(subnet, undefined) }
  const groupResponse = await client.send(
    'GET',
    client.resourceUrl(subnet.securityGroupId, NETWORK_API_VERSION),
  )
  if (groupResponse.status !== 200) {
    throw unreadable(
      client,
      groupResponse,
      'read network security group',
      `the network security group ${subnet.securityGroupId} of subnet ${subnetId}`,
    )
  }
  return { problem: subnetEgressProblem(subnet, groupResponse.body) }
}

function unreadable(
  client: ArmClient,
  response: ArmResponse,
  operation: string,
  what: string,
): Error {
  const failure = client.failure(operation, response)
  if (response.status === 401 || isTransientStatus(response.status)) return failure
  const hint =
    response.status === 403
      ? "give the host's identity Microsoft.Network/virtualNetworks/subnets/read and Microsoft.Network/networkSecurityGroups/read (Reader on the subnet's virtual network and on the security group)"
      : response.status === 404
        ? "check that subnetId names the pool's subnet and that its security group exists"
        : "see the cause for ARM's answer"
  return new SandboxControlRefusedError(
    'egress.deny-all',
    BACKEND_NAME,
    `could not read ${what} (HTTP ${response.status}), so whether it lets sandboxes reach the internet is unknown; ${hint}`,
    { cause: failure },
  )
}
