/**
 * The proxy must never be a destination of itself: a CONNECT to its own
 * listening port loops forever and eats every tunnel slot, and its control
 * port (in the gateway) must stay out of the sandbox's reach. Addresses of the
 * machine the proxy runs on count as self even on other ports, since services
 * bound there trust local callers. A proxy that runs apart from the machine
 * whose services must stay out of reach (the gateway in a container, next to
 * the Docker host) is told that machine's addresses too.
 */
import { networkInterfaces } from 'node:os'
import { classifyIp } from './address-screen.js'
import { type IpLiteral, parseIpLiteral, unwrapMappedIpv4 } from './ip-literal.js'

export interface Endpoint {
  readonly address: string
  readonly port: number
}

interface SelfEndpoint {
  /** `undefined` for a wildcard bind (`0.0.0.0`, `::`): every local address. */
  readonly ip: IpLiteral | undefined
  readonly port: number
}

const INTERFACE_CACHE_MS = 1_000

export class ProxySelf {
  readonly #endpoints: SelfEndpoint[] = []
  #interfaces: { readonly at: number; readonly addresses: ReadonlySet<string> } | undefined
  #hostAddresses: ReadonlySet<string> = new Set()

  /** Registers an endpoint the proxy or its companion listens on. */
  add(endpoint: Endpoint): void {
    const parsed = parseIpLiteral(endpoint.address)
    const ip = parsed === undefined ? undefined : unwrapMappedIpv4(parsed)
    const wildcard = ip === undefined || classifyIp(ip) === 'unspecified'
    this.#endpoints.push({ ip: wildcard ? undefined : ip, port: endpoint.port })
  }

  /**
   * Replaces the addresses of the machine this proxy serves, when that is not
   * the machine it runs on; they count as self exactly as its own interfaces
   * do. Throws on anything that is not an IP literal, so a bad list is never
   * half applied.
   */
  setHostAddresses(addresses: readonly string[]): void {
    const parsed = new Set<string>()
    for (const address of addresses) {
      const ip = parseIpLiteral(address)
      if (ip === undefined) throw new TypeError(`not an IP address: ${JSON.stringify(address)}`)
      parsed.add(unwrapMappedIpv4(ip).address)
    }
    this.#hostAddresses = parsed
  }

  clear(): void {
    this.#endpoints.length = 0
  }

  /** True when dialling `ip:port` would reach one of the registered endpoints. */
  isSelfEndpoint(ip: IpLiteral, port: number): boolean {
    const klass = classifyIp(ip)
    const local = klass === 'loopback' || klass === 'unspecified'
    return this.#endpoints.some((endpoint) => {
      if (endpoint.port !== port) return false
      if (endpoint.ip === undefined) return local || this.isLocalAddress(ip)
      if (endpoint.ip.address === ip.address) return true
      // Any loopback address reaches a loopback listener's port on most
      // systems, and `0.0.0.0`/`::` dial the local host on Linux.
      return local && classifyIp(endpoint.ip) === 'loopback'
    })
  }

  /** True when `ip` is an address of one of this machine's interfaces, or of the host it serves. */
  isLocalAddress(ip: IpLiteral): boolean {
    if (this.#hostAddresses.has(ip.address)) return true
    const now = Date.now()
    if (this.#interfaces === undefined || now - this.#interfaces.at > INTERFACE_CACHE_MS) {
      this.#interfaces = { at: now, addresses: localAddresses() }
    }
    return this.#interfaces.addresses.has(ip.address)
  }
}

function localAddresses(): ReadonlySet<string> {
  const addresses = new Set<string>()
  for (const entries of Object.values(networkInterfaces())) {
    for (const entry of entries ?? []) {
      const parsed = parseIpLiteral(entry.address)
      if (parsed !== undefined) addresses.add(unwrapMappedIpv4(parsed).address)
    }
  }
  return addresses
}
