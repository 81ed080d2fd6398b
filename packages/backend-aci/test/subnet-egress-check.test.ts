import { describe, expect, it } from 'vitest'
import { parseSubnetDocument, subnetEgressProblem } from '../src/subnet-egress-check.js'

const SUBNET_ID =
  '/subscriptions/s/resourceGroups/rg/providers/Microsoft.Network/virtualNetworks/vnet/subnets/sandboxes'
const NSG_ID =
  '/subscriptions/s/resourceGroups/rg/providers/Microsoft.Network/networkSecurityGroups/nsg'

interface Rule {
  name: string
  access: 'Allow' | 'Deny'
  priority: number
  direction?: 'Inbound' | 'Outbound'
  protocol?: string
  source?: string | string[]
  destination?: string | string[]
  ports?: string | string[]
}

/** A rule as ARM returns it: singular and plural fields, the unused one empty. */
function rule(spec: Rule) {
  const field = (value: string | string[] | undefined, fallback: string) => {
    const list = value === undefined ? [fallback] : Array.isArray(value) ? value : [value]
    return list.length === 1 ? { single: list[0], plural: [] } : { single: undefined, plural: list }
  }
  const source = field(spec.source, '*')
  const destination = field(spec.destination, '*')
  const ports = field(spec.ports, '*')
  return {
    name: spec.name,
    properties: {
      protocol: spec.protocol ?? '*',
      sourcePortRange: '*',
      sourcePortRanges: [],
      ...(destination.single === undefined ? {} : { destinationAddressPrefix: destination.single }),
      destinationAddressPrefixes: destination.plural,
      ...(source.single === undefined ? {} : { sourceAddressPrefix: source.single }),
      sourceAddressPrefixes: source.plural,
      ...(ports.single === undefined ? {} : { destinationPortRange: ports.single }),
      destinationPortRanges: ports.plural,
      access: spec.access,
      priority: spec.priority,
      direction: spec.direction ?? 'Outbound',
    },
  }
}

const AZURE_DEFAULTS = [
  rule({
    name: 'AllowVnetOutBound',
    access: 'Allow',
    priority: 65000,
    source: 'VirtualNetwork',
    destination: 'VirtualNetwork',
  }),
  rule({
    name: 'AllowInternetOutBound',
    access: 'Allow',
    priority: 65001,
    destination: 'Internet',
  }),
  rule({ name: 'DenyAllOutBound', access: 'Deny', priority: 65500 }),
]

const NO_DNS = rule({
  name: 'no-platform-dns',
  access: 'Deny',
  priority: 100,
  destination: 'AzurePlatformDNS',
})
const NO_OUTBOUND = rule({ name: 'no-outbound', access: 'Deny', priority: 4000 })

/** A security group document; `defaults: 'absent'` leaves `defaultSecurityRules` out. */
function nsg(securityRules: unknown[], defaults: unknown[] | 'absent' = AZURE_DEFAULTS) {
  return {
    id: NSG_ID,
    properties: {
      securityRules,
      ...(defaults === 'absent' ? {} : { defaultSecurityRules: defaults }),
    },
  }
}

function subnet(properties: Record<string, unknown> = {}) {
  return parseSubnetDocument(SUBNET_ID, {
    id: SUBNET_ID,
    properties: {
      addressPrefix: '10.40.2.0/24',
      networkSecurityGroup: { id: NSG_ID },
      ...properties,
    },
  })
}

const problem = (rules: unknown[]) => subnetEgressProblem(subnet(), nsg(rules))

describe('judging a subnet for deny-all', () => {
  it('holds when an own rule denies everything out, and Azure DNS by its tag', () => {
    expect(problem([NO_DNS, NO_OUTBOUND])).toBeUndefined()
    expect(
      problem([
        NO_DNS,
        rule({ name: 'no-internet', access: 'Deny', priority: 200, destination: 'Internet' }),
      ]),
    ).toBeUndefined()
    expect(
      problem([
        NO_DNS,
        rule({
          name: 'no-v4',
          access: 'Deny',
          priority: 200,
          destination: '0.0.0.0/0',
          ports: '0-65535',
        }),
      ]),
    ).toBeUndefined()
  })

  it('fails without a security group, saying Azure then lets everything out', () => {
    const found = subnetEgressProblem(subnet({ networkSecurityGroup: undefined }), undefined)
    expect(found).toContain(`subnet ${SUBNET_ID} has no network security group`)
    expect(found).toContain('lets every outbound flow through')
  })

  it("fails on Azure's default rules alone, naming AllowInternetOutBound and the fix", () => {
    const found = problem([NO_DNS])
    expect(found).toContain(`network security group ${NSG_ID}`)
    expect(found).toContain("Azure's default rule 'AllowInternetOutBound' (priority 65001")
    expect(found).toContain('add an outbound Deny rule for destination * (or Internet)')
  })

  it("applies Azure's default rules when the document leaves them out", () => {
    expect(subnetEgressProblem(subnet(), nsg([NO_DNS, NO_OUTBOUND], 'absent'))).toBeUndefined()
    expect(subnetEgressProblem(subnet(), nsg([NO_DNS], 'absent'))).toContain(
      "Azure's default rule 'AllowInternetOutBound'",
    )
  })

  it('fails on an Allow to a public address ahead of the Deny, naming it; the order in the document does not matter', () => {
    const allow = rule({
      name: 'to-pypi',
      access: 'Allow',
      priority: 300,
      protocol: 'Tcp',
      destination: '151.101.0.0/16',
      ports: '443',
    })
    const found = problem([NO_OUTBOUND, NO_DNS, allow])
    expect(found).toContain("rule 'to-pypi' (priority 300, Allow Tcp to 151.101.0.0/16 port 443)")
    expect(found).toContain('at a priority number below 300')
    // The same Allow after the Deny is never reached.
    expect(
      problem([
        NO_DNS,
        { ...allow, properties: { ...allow.properties, priority: 4001 } },
        NO_OUTBOUND,
      ]),
    ).toBeUndefined()
  })

  it('counts service tags other than VirtualNetwork as public, and private ranges as not', () => {
    for (const destination of [
      'Storage',
      'AzureCloud',
      '*',
      'Internet',
      '8.8.8.8',
      '2001:db8::/32',
      ['10.0.0.0/8', '1.1.1.1'],
    ]) {
      expect(
        problem([
          NO_DNS,
          rule({ name: 'out', access: 'Allow', priority: 200, destination }),
          NO_OUTBOUND,
        ]),
        String(destination),
      ).toContain("rule 'out'")
    }
    for (const destination of [
      'VirtualNetwork',
      '10.1.0.0/16',
      '192.168.4.4',
      ['172.16.0.0/12', '169.254.0.0/16'],
    ]) {
      expect(
        problem([
          NO_DNS,
          rule({ name: 'in-vnet', access: 'Allow', priority: 200, destination }),
          NO_OUTBOUND,
        ]),
        String(destination),
      ).toBeUndefined()
    }
  })

  it('does not take a narrower Deny for one that shuts the way', () => {
    for (const narrow of [
      rule({ name: 'tcp-only', access: 'Deny', priority: 200, protocol: 'Tcp' }),
      rule({ name: 'https-only', access: 'Deny', priority: 200, ports: '443' }),
      rule({ name: 'one-range', access: 'Deny', priority: 200, destination: '1.0.0.0/8' }),
      rule({ name: 'other-source', access: 'Deny', priority: 200, source: '10.99.0.0/16' }),
    ]) {
      expect(problem([NO_DNS, narrow]), narrow.name).toContain('AllowInternetOutBound')
    }
    // A source prefix that holds the whole subnet does cover it.
    expect(
      problem([
        NO_DNS,
        rule({ name: 'vnet', access: 'Deny', priority: 200, source: '10.40.0.0/16' }),
      ]),
    ).toBeUndefined()
  })

  it('ignores inbound rules and an Allow whose source cannot be the subnet', () => {
    const inbound = rule({ name: 'in', access: 'Allow', priority: 100, direction: 'Inbound' })
    const elsewhere = rule({
      name: 'other-subnet',
      access: 'Allow',
      priority: 110,
      source: '10.99.0.0/16',
    })
    expect(problem([inbound, elsewhere, NO_DNS, NO_OUTBOUND])).toBeUndefined()
    const overlapping = rule({
      name: 'this-subnet',
      access: 'Allow',
      priority: 110,
      source: '10.40.2.128/25',
    })
    expect(problem([overlapping, NO_DNS, NO_OUTBOUND])).toContain("'this-subnet'")
  })

  it('needs ::/0 as well as 0.0.0.0/0 for a subnet with IPv6', () => {
    const dualStack = subnet({
      addressPrefix: undefined,
      addressPrefixes: ['10.40.2.0/24', 'fd00:40::/64'],
    })
    const v4 = rule({ name: 'no-v4', access: 'Deny', priority: 200, destination: '0.0.0.0/0' })
    expect(subnetEgressProblem(dualStack, nsg([NO_DNS, v4]))).toContain('AllowInternetOutBound')
    const both = rule({
      name: 'no-v4-v6',
      access: 'Deny',
      priority: 200,
      destination: ['0.0.0.0/0', '::/0'],
    })
    expect(subnetEgressProblem(dualStack, nsg([NO_DNS, both]))).toBeUndefined()
  })

  it("fails when Azure's DNS is not denied by its own tag (a Deny for * does not stop it)", () => {
    const found = problem([NO_OUTBOUND])
    expect(found).toContain('no outbound rule denies AzurePlatformDNS')
    expect(found).toContain('168.63.129.16')
    const allowDns = rule({
      name: 'dns',
      access: 'Allow',
      priority: 90,
      destination: 'AzurePlatformDNS',
    })
    expect(problem([allowDns, NO_DNS, NO_OUTBOUND])).toContain("rule 'dns'")
  })

  it('gives the same verdict with a NAT gateway or a route table on the subnet', () => {
    const withRouting = {
      natGateway: {
        id: '/subscriptions/s/resourceGroups/rg/providers/Microsoft.Network/natGateways/nat',
      },
      routeTable: {
        id: '/subscriptions/s/resourceGroups/rg/providers/Microsoft.Network/routeTables/udr',
      },
    }
    expect(subnetEgressProblem(subnet(withRouting), nsg([NO_DNS, NO_OUTBOUND]))).toBeUndefined()
    expect(subnetEgressProblem(subnet(withRouting), nsg([NO_DNS]))).toContain(
      'AllowInternetOutBound',
    )
  })

  it('trusts no Deny it cannot place, and counts an Allow it cannot place as first', () => {
    const unplaced = (access: 'Allow' | 'Deny') => {
      const r = rule({ name: `unplaced-${access}`, access, priority: 0 })
      return { ...r, properties: { ...r.properties, priority: undefined } }
    }
    expect(problem([NO_DNS, unplaced('Deny')])).toContain('AllowInternetOutBound')
    expect(problem([NO_DNS, NO_OUTBOUND, unplaced('Allow')])).toContain("'unplaced-Allow'")
  })
})
