import type { BrokeredCredential, EgressPolicy, SandboxNetworkPolicy } from '@cordon/core'
import { askResolver, networkPolicySchema, parseConfig } from '@cordon/core/backend'
import type { EgressGateway } from './egress-gateway.js'

/** How often a `resolver` policy's closure is asked again while its sandbox lives. */
export const RESOLVER_REFRESH_MS = 30_000

/** A policy as the gateway enforces it: a `resolver`'s answer is a static list there. */
export type ProxiedPolicy = Exclude<EgressPolicy, { kind: 'deny-all' } | { kind: 'resolver' }>

/**
 * One sandbox's registration at the gateway. A `resolver` policy's closure
 * runs here, in the host, because it captures the host's context: its answer
 * is judged by core's one rule (`askResolver`: an answer with one invalid
 * entry, an error or a timeout denies everything) and sent to the gateway as
 * a static list when the sandbox is created and again every
 * {@link RESOLVER_REFRESH_MS}. A refused answer is reported through
 * `onResolverRefused`, naming the bad entry.
 *
 * A change of policy (`setAllowedHosts`, `close`) supersedes every refresh
 * begun before it: a resolver call still in flight then has its answer
 * dropped, so a revocation cannot be undone by an answer that was already
 * on its way.
 */
export class SandboxEgress {
  private refreshTimer: ReturnType<typeof setInterval> | undefined
  /** Bumped by every policy change; a refresh sends its answer only if none came since it began. */
  private generation = 0

  private constructor(
    private readonly gateway: EgressGateway,
    private readonly sandboxId: string,
    /** What the gateway was given at registration (a `resolver`'s first answer, as a static list). */
    readonly registered: ProxiedPolicy,
  ) {}

  static async register(
    gateway: EgressGateway,
    sandboxId: string,
    policy: Exclude<EgressPolicy, { kind: 'deny-all' }>,
    credentials: readonly BrokeredCredential[],
    onResolverRefused: (problem: string) => void,
  ): Promise<SandboxEgress> {
    const resolve = async (): Promise<ProxiedPolicy> => {
      if (policy.kind !== 'resolver') return policy
      const answer = await askResolver(policy.resolve)
      if (answer.ok) return { kind: 'static', allowedHosts: answer.allowedHosts }
      onResolverRefused(answer.problem)
      return { kind: 'static', allowedHosts: [] }
    }
    const first = await resolve()
    await gateway.addClient(sandboxId, first, credentials)
    const egress = new SandboxEgress(gateway, sandboxId, first)
    if (policy.kind === 'resolver') {
      egress.refreshTimer = setInterval(() => {
        const began = egress.generation
        void resolve().then((next) =>
          egress.generation !== began
            ? undefined
            : gateway.setPolicy(sandboxId, next).catch(() => {}),
        )
      }, RESOLVER_REFRESH_MS)
      egress.refreshTimer.unref()
    }
    return egress
  }

  /** Replaces the allowlist for new connections (credentials stay); stops any resolver refresh. */
  async setAllowedHosts(update: SandboxNetworkPolicy): Promise<void> {
    const parsed = parseConfig(networkPolicySchema, update, 'network policy update')
    this.supersedeRefresh()
    await this.gateway.setPolicy(this.sandboxId, {
      kind: 'static',
      allowedHosts: [...parsed.allowedHosts],
    })
  }

  async close(): Promise<void> {
    this.supersedeRefresh()
    await this.gateway.removeClient(this.sandboxId)
  }

  /** Stops later refreshes and drops the answer of one in flight. */
  private supersedeRefresh(): void {
    this.generation++
    if (this.refreshTimer) clearInterval(this.refreshTimer)
    this.refreshTimer = undefined
  }
}
