/**
 * The pool's subnet and its network security group, as `Microsoft.Network`
 * serves them. Only the documents are modelled: the sandboxes' real network
 * is Docker's `--internal` network, which lets nothing out whatever the rules
 * say (subnet-isolation.ts keeps the host out of reach too). Tests configure
 * the rules to see how the backend judges them.
 */

/** One security rule, with the fields ARM returns in `properties`. */
export interface StandinSecurityRule {
  readonly name: string
  readonly direction: 'Inbound' | 'Outbound'
  readonly access: 'Allow' | 'Deny'
  /** 100 to 4096 for a rule of one's own; Azure's default rules use 65000 and up. */
  readonly priority: number
  /** `Tcp`, `Udp`, `Icmp`, `Esp`, `Ah` or `*`. */
  readonly protocol: string
  readonly sourceAddressPrefix?: string
  readonly sourceAddressPrefixes?: readonly string[]
  readonly sourcePortRange?: string
  readonly sourcePortRanges?: readonly string[]
  readonly destinationAddressPrefix?: string
  readonly destinationAddressPrefixes?: readonly string[]
  readonly destinationPortRange?: string
  readonly destinationPortRanges?: readonly string[]
  readonly description?: string
}

export interface StandinSecurityGroupSpec {
  readonly name: string
  /** The group's own rules; Azure's default rules are always added after them. */
  readonly securityRules: readonly StandinSecurityRule[]
}

export interface StandinSubnetSpec {
  readonly addressPrefix: string
  /** The subnet's security group, or `undefined` for a subnet without one. */
  readonly securityGroup: StandinSecurityGroupSpec | undefined
  /**
   * The group a subnet names but that cannot be read (deleted, or in a
   * resource group the caller may not see): its GET is 404.
   */
  readonly securityGroupMissing?: boolean
  /** Names of a NAT gateway and a route table to show on the subnet (only referenced, not served). */
  readonly natGateway?: string
  readonly routeTable?: string
}

/**
 * The rules `packages/backend-aci/README.md` tells an operator to create
 * (setup step 2): the agent reachable from the host, nothing else in, and
 * nothing out, Azure's DNS and metadata endpoints included.
 */
export const README_SECURITY_RULES: readonly StandinSecurityRule[] = [
  {
    name: 'agent-from-host',
    direction: 'Inbound',
    access: 'Allow',
    priority: 100,
    protocol: 'Tcp',
    sourceAddressPrefix: 'VirtualNetwork',
    sourcePortRange: '*',
    destinationAddressPrefix: '*',
    destinationPortRange: '2024',
  },
  {
    name: 'no-other-inbound',
    direction: 'Inbound',
    access: 'Deny',
    priority: 200,
    protocol: '*',
    sourceAddressPrefix: '*',
    sourcePortRange: '*',
    destinationAddressPrefix: '*',
    destinationPortRange: '*',
  },
  denyOutbound('no-platform-dns', 100, 'AzurePlatformDNS'),
  denyOutbound('no-platform-imds', 110, 'AzurePlatformIMDS'),
  denyOutbound('no-outbound', 120, '*'),
]

/** An outbound Deny for every protocol and port to `destination`. */
export function denyOutbound(
  name: string,
  priority: number,
  destination: string,
): StandinSecurityRule {
  return {
    name,
    direction: 'Outbound',
    access: 'Deny',
    priority,
    protocol: '*',
    sourceAddressPrefix: '*',
    sourcePortRange: '*',
    destinationAddressPrefix: destination,
    destinationPortRange: '*',
  }
}

export const DEFAULT_SUBNET: StandinSubnetSpec = {
  addressPrefix: '10.40.2.0/24',
  securityGroup: { name: 'cordon-sandboxes', securityRules: README_SECURITY_RULES },
}

/** Azure's default rules, present in every security group after its own (AllowVnetOutBound and AllowInternetOutBound let traffic out). */
export const AZURE_DEFAULT_SECURITY_RULES: readonly StandinSecurityRule[] = [
  defaultRule('AllowVnetInBound', 'Inbound', 'Allow', 65000, 'VirtualNetwork', 'VirtualNetwork'),
  defaultRule('AllowAzureLoadBalancerInBound', 'Inbound', 'Allow', 65001, 'AzureLoadBalancer', '*'),
  defaultRule('DenyAllInBound', 'Inbound', 'Deny', 65500, '*', '*'),
  defaultRule('AllowVnetOutBound', 'Outbound', 'Allow', 65000, 'VirtualNetwork', 'VirtualNetwork'),
  defaultRule('AllowInternetOutBound', 'Outbound', 'Allow', 65001, '*', 'Internet'),
  defaultRule('DenyAllOutBound', 'Outbound', 'Deny', 65500, '*', '*'),
]

function defaultRule(
  name: string,
  direction: 'Inbound' | 'Outbound',
  access: 'Allow' | 'Deny',
  priority: number,
  source: string,
  destination: string,
): StandinSecurityRule {
  return {
    name,
    direction,
    access,
    priority,
    protocol: '*',
    sourceAddressPrefix: source,
    sourcePortRange: '*',
    destinationAddressPrefix: destination,
    destinationPortRange: '*',
  }
}

/**
 * The subnet and security-group documents of the stand-in, which a test may
 * reconfigure at any time with {@link StandinNetwork.configure}.
 */
export class StandinNetwork {
  private spec: StandinSubnetSpec

  constructor(
    private readonly ids: {
      readonly subnetId: string
      readonly resourceGroupId: string
      readonly location: string
    },
    private readonly initial: StandinSubnetSpec,
  ) {
    this.spec = initial
  }

  /** Changes the given settings of the subnet (its security group and rules included), keeping the others. */
  configure(spec: Partial<StandinSubnetSpec>): void {
    this.spec = { ...this.spec, ...spec }
  }

  /** Back to the subnet the stand-in started with. */
  reset(): void {
    this.spec = this.initial
  }

  get current(): StandinSubnetSpec {
    return this.spec
  }

  securityGroupId(name: string): string {
    return `${this.ids.resourceGroupId}/providers/Microsoft.Network/networkSecurityGroups/${name}`
  }

  /** `Microsoft.Network/virtualNetworks/subnets`, as GET returns it. */
  subnetDocument(): Record<string, unknown> {
    const { subnetId, resourceGroupId } = this.ids
    const spec = this.spec
    const network = `${resourceGroupId}/providers/Microsoft.Network`
    return {
      id: subnetId,
      name: subnetId.slice(subnetId.lastIndexOf('/') + 1),
      etag: etag(),
      type: 'Microsoft.Network/virtualNetworks/subnets',
      properties: {
        provisioningState: 'Succeeded',
        addressPrefix: spec.addressPrefix,
        ...(spec.securityGroup
          ? { networkSecurityGroup: { id: this.securityGroupId(spec.securityGroup.name) } }
          : {}),
        ...(spec.natGateway
          ? { natGateway: { id: `${network}/natGateways/${spec.natGateway}` } }
          : {}),
        ...(spec.routeTable
          ? { routeTable: { id: `${network}/routeTables/${spec.routeTable}` } }
          : {}),
        delegations: [
          {
            id: `${subnetId}/delegations/aci`,
            name: 'aci',
            etag: etag(),
            type: 'Microsoft.Network/virtualNetworks/subnets/delegations',
            properties: {
              provisioningState: 'Succeeded',
              serviceName: 'Microsoft.ContainerInstance/containerGroups',
              actions: ['Microsoft.Network/virtualNetworks/subnets/action'],
            },
          },
        ],
        privateEndpointNetworkPolicies: 'Disabled',
        privateLinkServiceNetworkPolicies: 'Enabled',
      },
    }
  }

  /** `Microsoft.Network/networkSecurityGroups`, as GET returns it; undefined when there is no such group. */
  securityGroupDocument(name: string): Record<string, unknown> | undefined {
    const group = this.spec.securityGroup
    if (!group || this.spec.securityGroupMissing || group.name.toLowerCase() !== name.toLowerCase())
      return undefined
    const id = this.securityGroupId(group.name)
    return {
      id,
      name: group.name,
      etag: etag(),
      type: 'Microsoft.Network/networkSecurityGroups',
      location: this.ids.location,
      properties: {
        provisioningState: 'Succeeded',
        resourceGuid: '7d3c2b4e-0000-4000-8000-000000000001',
        securityRules: group.securityRules.map((rule) => ruleDocument(id, 'securityRules', rule)),
        defaultSecurityRules: AZURE_DEFAULT_SECURITY_RULES.map((rule) =>
          ruleDocument(id, 'defaultSecurityRules', rule),
        ),
        subnets: [{ id: this.ids.subnetId }],
      },
    }
  }
}

/** A rule as ARM returns it: both the singular and the plural fields, the unused ones empty. */
function ruleDocument(
  groupId: string,
  collection: 'securityRules' | 'defaultSecurityRules',
  rule: StandinSecurityRule,
): Record<string, unknown> {
  return {
    id: `${groupId}/${collection}/${rule.name}`,
    name: rule.name,
    etag: etag(),
    type: `Microsoft.Network/networkSecurityGroups/${collection}`,
    properties: {
      provisioningState: 'Succeeded',
      ...(rule.description === undefined ? {} : { description: rule.description }),
      protocol: rule.protocol,
      ...singularOrPlural(
        'sourcePortRange',
        rule.sourcePortRange,
        'sourcePortRanges',
        rule.sourcePortRanges,
      ),
      ...singularOrPlural(
        'destinationPortRange',
        rule.destinationPortRange,
        'destinationPortRanges',
        rule.destinationPortRanges,
      ),
      ...singularOrPlural(
        'sourceAddressPrefix',
        rule.sourceAddressPrefix,
        'sourceAddressPrefixes',
        rule.sourceAddressPrefixes,
      ),
      ...singularOrPlural(
        'destinationAddressPrefix',
        rule.destinationAddressPrefix,
        'destinationAddressPrefixes',
        rule.destinationAddressPrefixes,
      ),
      access: rule.access,
      priority: rule.priority,
      direction: rule.direction,
    },
  }
}

function singularOrPlural(
  field: string,
  single: string | undefined,
  plural: string,
  list: readonly string[] | undefined,
): Record<string, unknown> {
  return { ...(single === undefined ? {} : { [field]: single }), [plural]: list ?? [] }
}

function etag(): string {
  return 'W/"00000000-0000-4000-8000-000000000000"'
}
