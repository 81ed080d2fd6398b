import type { ArmRequestKind } from './fault-plan.js'

export type ArmRoute =
  | { readonly kind: 'containerGroup'; readonly name: string }
  /** The resource group's container groups (ARM's List By Resource Group). */
  | { readonly kind: 'containerGroups' }
  | { readonly kind: 'profile'; readonly name: string; readonly revision: number | undefined }
  | { readonly kind: 'operation'; readonly id: string; readonly style: 'status' | 'result' }
  | { readonly kind: 'runtimeView'; readonly pool: string }
  | { readonly kind: 'subnet'; readonly virtualNetwork: string; readonly name: string }
  | { readonly kind: 'networkSecurityGroup'; readonly name: string }

/** The resource provider a route belongs to, which decides the accepted api-versions. */
export function providerOf(
  route: ArmRoute,
): 'Microsoft.ContainerInstance' | 'Microsoft.StandbyPool' | 'Microsoft.Network' {
  switch (route.kind) {
    case 'runtimeView':
      return 'Microsoft.StandbyPool'
    case 'subnet':
    case 'networkSecurityGroup':
      return 'Microsoft.Network'
    default:
      return 'Microsoft.ContainerInstance'
  }
}

export function requestKindOf(route: ArmRoute): ArmRequestKind {
  return route.kind === 'containerGroups' ? 'containerGroup' : route.kind
}

const segment = '([^/]+)'

/**
 * Matches a request path against the resources the stand-in serves, for its
 * subscription, resource group and location only. Like ARM, resource provider
 * and type names match case-insensitively.
 */
export function parseArmPath(
  path: string,
  scope: {
    readonly subscriptionId: string
    readonly resourceGroup: string
    readonly location: string
  },
): ArmRoute | undefined {
  const sub = `/subscriptions/${escapeRegExp(scope.subscriptionId)}`
  const rg = `${sub}/resourceGroups/${escapeRegExp(scope.resourceGroup)}`
  const aci = `${rg}/providers/Microsoft\\.ContainerInstance`
  const network = `${rg}/providers/Microsoft\\.Network`
  const ops = `${sub}/providers/Microsoft\\.ContainerInstance/locations/${escapeRegExp(scope.location)}`
  const patterns: Array<[RegExp, (m: RegExpExecArray) => ArmRoute]> = [
    [
      new RegExp(`^${aci}/containerGroups/${segment}$`, 'i'),
      (m) => ({ kind: 'containerGroup', name: m[1]! }),
    ],
    [new RegExp(`^${aci}/containerGroups/?$`, 'i'), () => ({ kind: 'containerGroups' })],
    [
      new RegExp(`^${aci}/containerGroupProfiles/${segment}(?:/revisions/(\\d+))?$`, 'i'),
      (m) => ({
        kind: 'profile',
        name: m[1]!,
        revision: m[2] === undefined ? undefined : Number(m[2]),
      }),
    ],
    [
      new RegExp(`^${ops}/operations/${segment}$`, 'i'),
      (m) => ({ kind: 'operation', id: m[1]!, style: 'status' }),
    ],
    [
      new RegExp(`^${ops}/operationResults/${segment}$`, 'i'),
      (m) => ({ kind: 'operation', id: m[1]!, style: 'result' }),
    ],
    [
      new RegExp(
        `^${rg}/providers/Microsoft\\.StandbyPool/standbyContainerGroupPools/${segment}/runtimeViews/latest$`,
        'i',
      ),
      (m) => ({ kind: 'runtimeView', pool: m[1]! }),
    ],
    [
      new RegExp(`^${network}/virtualNetworks/${segment}/subnets/${segment}$`, 'i'),
      (m) => ({ kind: 'subnet', virtualNetwork: m[1]!, name: m[2]! }),
    ],
    [
      new RegExp(`^${network}/networkSecurityGroups/${segment}$`, 'i'),
      (m) => ({ kind: 'networkSecurityGroup', name: m[1]! }),
    ],
  ]
  const decoded = decodeURIComponent(path)
  for (const [pattern, build] of patterns) {
    const match = pattern.exec(decoded)
    if (match) return build(match)
  }
  return undefined
}

function escapeRegExp(text: string): string {
  return text.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')
}
