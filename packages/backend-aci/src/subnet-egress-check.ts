/**
 * Judges whether a subnet's network security group keeps a claimed group
 * off the internet, from the ARM documents of the subnet and the group,
 * evaluating outbound rules the way Azure does: the group's own rules, then
 * Azure's default rules, each in priority order, the first rule that matches
 * a packet deciding it.
 *
 * Only the security group is judged. A NAT gateway or a route table on the
 * subnet changes where an allowed packet goes, not whether the security
 * group lets it leave, so neither changes the verdict; nor are firewall
 * appliances, Virtual Network Manager admin rules or the VNet's DNS servers
 * evaluated. The judgment is conservative: a rule that could let some packet
 * reach a public address counts as letting traffic out, and only a Deny that
 * covers every protocol, port and public destination from the whole subnet
 * counts as shutting it.
 */

/** What the check needs of a `Microsoft.Network/virtualNetworks/subnets` document. */
export interface SubnetFacts {
  readonly id: string
  /** `addressPrefix` and `addressPrefixes` together; empty if the document has neither. */
  readonly addressPrefixes: readonly string[]
  /** The id of the subnet's network security group, if it has one. */
  readonly securityGroupId: string | undefined
}

export function parseSubnetDocument(subnetId: string, document: unknown): SubnetFacts {
  const properties = ((document as { properties?: unknown } | undefined)?.properties ?? {}) as {
    addressPrefix?: unknown
    addressPrefixes?: unknown
    networkSecurityGroup?: { id?: unknown }
  }
  const prefixes = [
    properties.addressPrefix,
    ...(Array.isArray(properties.addressPrefixes) ? properties.addressPrefixes : []),
  ].filter((prefix): prefix is string => typeof prefix === 'string' && prefix.length > 0)
  const groupId = properties.networkSecurityGroup?.id
  return {
    id: subnetId,
    addressPrefixes: prefixes,
    securityGroupId: typeof groupId === 'string' && groupId.length > 0 ? groupId : undefined,
  }
}

interface OutboundRule {
  readonly name: string
  readonly origin: 'own' | 'default'
  readonly priority: number
  readonly access: string
  readonly protocol: string
  readonly sources: readonly string[]
  readonly sourcePorts: readonly string[]
  readonly destinations: readonly string[]
  readonly destinationPorts: readonly string[]
  /** The rule targets application security groups (network interfaces in the VNet) rather than prefixes. */
  readonly destinationIsAsg: boolean
}

/**
 * Azure's default outbound rules, which every security group has after its
 * own. Used when a document leaves `defaultSecurityRules` out: Azure applies
 * them whether or not a GET lists them.
 */
const AZURE_DEFAULT_OUTBOUND: readonly OutboundRule[] = [
  defaultRule('AllowVnetOutBound', 65000, 'Allow', 'VirtualNetwork', 'VirtualNetwork'),
  defaultRule('AllowInternetOutBound', 65001, 'Allow', '*', 'Internet'),
  defaultRule('DenyAllOutBound', 65500, 'Deny', '*', '*'),
]

/**
 * Why the subnet lets a claimed group reach the internet, or undefined when
 * its security group denies that. `securityGroup` is the group's document,
 * undefined when the subnet has none.
 */
export function subnetEgressProblem(
  subnet: SubnetFacts,
  securityGroup: unknown,
): string | undefined {
  if (subnet.securityGroupId === undefined) {
    return `subnet ${subnet.id} has no network security group, so Azure lets every outbound flow through; attach one whose outbound rules deny destination * on all protocols and ports (the README's setup step 2)`
  }
  const group = subnet.securityGroupId
  const rules = outboundRules(securityGroup)
  return internetProblem(subnet, group, rules) ?? platformDnsProblem(subnet, group, rules)
}

function internetProblem(
  subnet: SubnetFacts,
  group: string,
  rules: readonly OutboundRule[],
): string | undefined {
  for (const rule of rules) {
    if (isDeny(rule)) {
      if (deniesAllInternet(rule, subnet)) return undefined
      // A narrower Deny shuts only part of the way; keep looking for an Allow past it.
      continue
    }
    if (mayReachPublicAddress(rule) && mayComeFromSubnet(rule, subnet)) {
      const fix =
        rule.origin === 'default'
          ? 'add an outbound Deny rule for destination * (or Internet), protocol * and all ports at a priority of 4096 or less'
          : `add an outbound Deny rule for destination * (or Internet), protocol * and all ports at a priority number below ${rule.priority}, or remove this rule`
      return `subnet ${subnet.id} has network security group ${group}, whose outbound ${describe(rule)} lets traffic reach the internet before any rule denies it; ${fix}`
    }
  }
  return `subnet ${subnet.id} has network security group ${group}, in which no outbound rule denies traffic to the internet on every protocol and port; add an outbound Deny rule for destination * (or Internet), protocol * and all ports`
}

/**
 * Azure's DNS (168.63.129.16) is not subject to a security group's rules
 * unless a rule names the `AzurePlatformDNS` service tag; a Deny for `*`
 * does not stop it. It resolves internet names, so a sandbox could carry
 * data out in DNS queries.
 */
function platformDnsProblem(
  subnet: SubnetFacts,
  group: string,
  rules: readonly OutboundRule[],
): string | undefined {
  const fix =
    'add an outbound Deny rule for destination AzurePlatformDNS, protocol * and all ports, before any rule that allows it'
  for (const rule of rules) {
    if (!rule.destinations.some((prefix) => sameName(prefix, 'AzurePlatformDNS'))) continue
    if (isDeny(rule)) {
      if (coversEverything(rule, subnet)) return undefined
      continue
    }
    return `subnet ${subnet.id} has network security group ${group}, whose outbound ${describe(rule)} lets Azure's DNS at 168.63.129.16 resolve internet names for the sandbox, a way to carry data out; ${fix}`
  }
  return `subnet ${subnet.id} has network security group ${group}, in which no outbound rule denies AzurePlatformDNS; Azure's DNS at 168.63.129.16 is filtered only by rules that name that service tag, and it resolves internet names for the sandbox, a way to carry data out; ${fix}`
}

/** The group's outbound rules in the order Azure evaluates them. */
function outboundRules(securityGroup: unknown): OutboundRule[] {
  const properties = ((securityGroup as { properties?: unknown } | undefined)?.properties ??
    {}) as { securityRules?: unknown; defaultSecurityRules?: unknown }
  const own = parseRules(properties.securityRules, 'own')
  const defaults = Array.isArray(properties.defaultSecurityRules)
    ? parseRules(properties.defaultSecurityRules, 'default')
    : [...AZURE_DEFAULT_OUTBOUND]
  const byPriority = (a: OutboundRule, b: OutboundRule): number => a.priority - b.priority
  return [...own.sort(byPriority), ...defaults.sort(byPriority)]
}

function parseRules(value: unknown, origin: OutboundRule['origin']): OutboundRule[] {
  if (!Array.isArray(value)) return []
  const rules: OutboundRule[] = []
  for (const entry of value as Array<{ name?: unknown; properties?: Record<string, unknown> }>) {
    const p = entry?.properties ?? {}
    if (typeof p.direction !== 'string' || !sameName(p.direction, 'Outbound')) continue
    const access = typeof p.access === 'string' ? p.access : ''
    const priority =
      typeof p.priority === 'number' && Number.isFinite(p.priority) ? p.priority : undefined
    // A Deny is trusted only where Azure would place it; an Allow of unknown
    // priority is taken to come first, since it might.
    if (priority === undefined && sameName(access, 'Deny')) continue
    const asgs = p.destinationApplicationSecurityGroups
    rules.push({
      name: typeof entry.name === 'string' ? entry.name : '(unnamed)',
      origin,
      priority: priority ?? Number.NEGATIVE_INFINITY,
      access,
      protocol: typeof p.protocol === 'string' ? p.protocol : '',
      sources: listOf(p.sourceAddressPrefix, p.sourceAddressPrefixes),
      sourcePorts: listOf(p.sourcePortRange, p.sourcePortRanges),
      destinations: listOf(p.destinationAddressPrefix, p.destinationAddressPrefixes),
      destinationPorts: listOf(p.destinationPortRange, p.destinationPortRanges),
      destinationIsAsg: Array.isArray(asgs) && asgs.length > 0,
    })
  }
  return rules
}

/** ARM returns a singular field, a plural one, or both (the unused one empty). */
function listOf(single: unknown, plural: unknown): string[] {
  const values = [single, ...(Array.isArray(plural) ? plural : [])]
  return values.filter((value): value is string => typeof value === 'string' && value.length > 0)
}

function isDeny(rule: OutboundRule): boolean {
  return sameName(rule.access, 'Deny')
}

/** Every protocol and port, from every address of the subnet: what a Deny must cover to shut the way. */
function coversEverything(rule: OutboundRule, subnet: SubnetFacts): boolean {
  return (
    rule.protocol === '*' &&
    rule.destinationPorts.some(isEveryPort) &&
    rule.sourcePorts.some(isEveryPort) &&
    coversSubnet(rule.sources, subnet)
  )
}

function deniesAllInternet(rule: OutboundRule, subnet: SubnetFacts): boolean {
  if (!coversEverything(rule, subnet)) return false
  const names = rule.destinations
  if (names.some((prefix) => prefix === '*' || sameName(prefix, 'Internet'))) return true
  // 0.0.0.0/0 covers IPv4 only; a subnet with IPv6 prefixes needs ::/0 as well.
  const ipv4 = names.includes('0.0.0.0/0')
  const ipv6 = names.includes('::/0')
  const subnetHasIpv6 = subnet.addressPrefixes.some((prefix) => prefix.includes(':'))
  return ipv4 && (ipv6 || !subnetHasIpv6)
}

function isEveryPort(range: string): boolean {
  return range === '*' || range === '0-65535'
}

/** The rule's sources include every address of the subnet. */
function coversSubnet(sources: readonly string[], subnet: SubnetFacts): boolean {
  if (sources.length === 0) return false
  if (sources.some((source) => source === '*' || sameName(source, 'VirtualNetwork'))) return true
  if (subnet.addressPrefixes.length === 0) return false
  return subnet.addressPrefixes.every((prefix) => {
    const inner = parseIpv4Cidr(prefix)
    return (
      inner !== undefined &&
      sources.some((source) => {
        const outer = parseIpv4Cidr(source)
        return outer !== undefined && contains(outer, inner)
      })
    )
  })
}

/** Could the rule match a packet from the subnet? Only a source that provably excludes it says no. */
function mayComeFromSubnet(rule: OutboundRule, subnet: SubnetFacts): boolean {
  if (rule.sources.length === 0 || subnet.addressPrefixes.length === 0) return true
  return rule.sources.some((source) => {
    const outer = parseIpv4Cidr(source)
    if (outer === undefined) return true
    return subnet.addressPrefixes.some((prefix) => {
      const inner = parseIpv4Cidr(prefix)
      return inner === undefined || overlaps(outer, inner)
    })
  })
}

/**
 * Could the rule let a packet reach a public address? Only destinations that
 * are provably private say no: the `VirtualNetwork` tag, application
 * security groups, and IPv4 prefixes inside private or link-local ranges.
 * Every other service tag (Storage, AzureCloud, AzurePlatformDNS...) names
 * public addresses.
 */
function mayReachPublicAddress(rule: OutboundRule): boolean {
  if (rule.destinations.length === 0) return !rule.destinationIsAsg
  return rule.destinations.some((prefix) => {
    if (sameName(prefix, 'VirtualNetwork')) return false
    const range = parseIpv4Cidr(prefix)
    return range === undefined || !PRIVATE_IPV4.some((space) => contains(space, range))
  })
}

interface Ipv4Range {
  readonly first: number
  readonly last: number
}

/** Private (RFC 1918), shared (RFC 6598), loopback and link-local space: not reachable on the internet. */
const PRIVATE_IPV4: readonly Ipv4Range[] = [
  '10.0.0.0/8',
  '172.16.0.0/12',
  '192.168.0.0/16',
  '100.64.0.0/10',
  '127.0.0.0/8',
  '169.254.0.0/16',
].map((cidr) => parseIpv4Cidr(cidr)!)

function parseIpv4Cidr(text: string): Ipv4Range | undefined {
  const match = /^(\d{1,3})\.(\d{1,3})\.(\d{1,3})\.(\d{1,3})(?:\/(\d{1,2}))?$/.exec(text.trim())
  if (!match) return undefined
  const octets = match.slice(1, 5).map(Number)
  const bits = match[5] === undefined ? 32 : Number(match[5])
  if (octets.some((octet) => octet > 255) || bits > 32) return undefined
  const address = octets.reduce((value, octet) => value * 256 + octet, 0)
  const size = 2 ** (32 - bits)
  const first = address - (address % size)
  return { first, last: first + size - 1 }
}

function contains(outer: Ipv4Range, inner: Ipv4Range): boolean {
  return outer.first <= inner.first && inner.last <= outer.last
}

function overlaps(a: Ipv4Range, b: Ipv4Range): boolean {
  return a.first <= b.last && b.first <= a.last
}

function sameName(a: string, b: string): boolean {
  return a.toLowerCase() === b.toLowerCase()
}

function describe(rule: OutboundRule): string {
  const kind = rule.origin === 'default' ? "Azure's default rule" : 'rule'
  const destination = rule.destinations.length > 0 ? rule.destinations.join(', ') : '(none)'
  const ports = rule.destinationPorts.length > 0 ? rule.destinationPorts.join(', ') : '*'
  const priority = Number.isFinite(rule.priority) ? String(rule.priority) : 'unknown'
  return `${kind} '${rule.name}' (priority ${priority}, ${rule.access || 'no access'} ${rule.protocol || '*'} to ${destination} port ${ports})`
}

function defaultRule(
  name: string,
  priority: number,
  access: string,
  source: string,
  destination: string,
): OutboundRule {
  return {
    name,
    origin: 'default',
    priority,
    access,
    protocol: '*',
    sources: [source],
    sourcePorts: ['*'],
    destinations: [destination],
    destinationPorts: ['*'],
    destinationIsAsg: false,
  }
}
