import type { BrokeredCredential, EgressPolicy, SandboxNetworkPolicy } from '@cordon/core'
import { networkPolicySchema, parseAllowlistEntry, parseConfig } from '@cordon/core/backend'
import type { EgressGateway } from './egress-gateway.js'

/** How often a `resolver` policy's closure is asked again while its sandbox lives. */
export const RESOLVER_REFRESH_MS = 30_000
const RESOLVER_TIMEOUT_MS = 5_000

type ProxiedPolicy = Exclude<EgressPolicy, { kind: 'deny-all' } | { kind: 'resolver' }>

/**
 * One sandbox's registration at the gateway. A `resolver` policy's closure
 * runs here, in the host, because it captures the host's context: its answer
 * is sent to the gateway as a static list when the sandbox is created and
 * again every {@link RESOLVER_REFRESH_MS}; a resolver that throws or times out
 * leaves the sandbox denying everything until it answers again.
 */
export class SandboxEgress {
  private refreshTimer: ReturnType<typeof setInterval> | undefined
  private closed = false

  private constructor(
    private readonly gateway: EgressGateway,
    private readonly sandboxId: string,
    readonly socketPath: string,
  ) {}

  static async register(
    gateway: EgressGateway,
    sandboxId: string,
    relayId: string,
    policy: Exclude<EgressPolicy, { kind: 'deny-all' }>,
    credentials: readonly BrokeredCredential[],
  ): Promise<SandboxEgress> {
    const first = policy.kind === 'resolver' ? await resolveToStatic(policy.resolve) : policy
    const socketPath = await gateway.addClient(sandboxId, relayId, first, credentials)
    const egress = new SandboxEgress(gateway, sandboxId, socketPath)
    if (policy.kind === 'resolver') {
      egress.refreshTimer = setInterval(() => {
        void resolveToStatic(policy.resolve).then((next) =>
          egress.closed ? undefined : gateway.setPolicy(sandboxId, next),
        )
      }, RESOLVER_REFRESH_MS)
      egress.refreshTimer.unref()
    }
    return egress
  }

  /** Replaces the allowlist for new connections; stops any resolver refresh. */
  async setAllowedHosts(update: SandboxNetworkPolicy): Promise<void> {
    const parsed = parseConfig(networkPolicySchema, update, 'network policy update')
    if (this.refreshTimer) clearInterval(this.refreshTimer)
    await this.gateway.setPolicy(this.sandboxId, {
      kind: 'static',
      allowedHosts: [...parsed.allowedHosts],
    })
  }

  async close(): Promise<void> {
    this.closed = true
    if (this.refreshTimer) clearInterval(this.refreshTimer)
    await this.gateway.removeClient(this.sandboxId)
  }
}

async function resolveToStatic(resolve: () => Promise<readonly string[]>): Promise<ProxiedPolicy> {
  try {
    const hosts = await Promise.race([
      resolve(),
      new Promise<never>((_, reject) =>
        setTimeout(() => reject(new Error('resolver timed out')), RESOLVER_TIMEOUT_MS).unref(),
      ),
    ])
    // An entry the gateway would reject is dropped rather than failing the whole list.
    return {
      kind: 'static',
      allowedHosts: hosts.filter((host) => parseAllowlistEntry(host) !== undefined),
    }
  } catch {
    return { kind: 'static', allowedHosts: [] }
  }
}
