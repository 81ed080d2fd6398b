/** What a request is about, for aiming a fault at some requests only. */
export type ArmRequestKind =
  | 'containerGroup'
  | 'operation'
  | 'profile'
  | 'runtimeView'
  | 'subnet'
  | 'networkSecurityGroup'

export type ArmFault =
  /** 429 with `Retry-After`, as ARM answers a throttled caller. */
  | { readonly kind: 'throttle'; readonly retryAfterSeconds?: number }
  /** A transient server error (500, 502, 503 or 504), optionally with `Retry-After`. */
  | {
      readonly kind: 'server-error'
      readonly status?: 500 | 502 | 503 | 504
      readonly retryAfterSeconds?: number
    }
  /** 409: another operation holds the resource. */
  | { readonly kind: 'conflict' }
  /** 401: the bearer token is not accepted. */
  | { readonly kind: 'unauthorized' }
  /** 403: the caller may not do this. */
  | { readonly kind: 'forbidden' }
  /** The claim is accepted but its operation ends `Failed`. */
  | { readonly kind: 'provisioning-failure' }
  /** The claim finds the pool empty (`InsufficientContainerGroups`). */
  | { readonly kind: 'pool-empty' }

export interface FaultMatch {
  readonly method?: 'GET' | 'PUT' | 'DELETE'
  readonly resource?: ArmRequestKind
}

interface ArmedFault {
  readonly fault: ArmFault
  readonly match: FaultMatch
  remaining: number
}

/**
 * Faults the stand-in injects on demand, each for the next `count` requests
 * that match. Request-level faults answer before the request is served;
 * `provisioning-failure` and `pool-empty` change how the next claims go.
 */
export class FaultPlan {
  private armed: ArmedFault[] = []
  /** Extra time every claim spends in `Creating` before it succeeds. */
  provisioningDelayMs = 0

  inject(fault: ArmFault, options: { count?: number } & FaultMatch = {}): void {
    const { count = 1, ...match } = options
    this.armed.push({ fault, match, remaining: count })
  }

  /** Slows every later claim down by `ms` in the `Creating` state. */
  slowProvisioning(ms: number): void {
    this.provisioningDelayMs = ms
  }

  clear(): void {
    this.armed = []
    this.provisioningDelayMs = 0
  }

  /** The first armed fault of one of `kinds` that matches, used up by one. */
  take(
    kinds: ReadonlyArray<ArmFault['kind']>,
    request: { method: string; resource: ArmRequestKind },
  ): ArmFault | undefined {
    const found = this.armed.find(
      (armed) =>
        kinds.includes(armed.fault.kind) &&
        (armed.match.method === undefined || armed.match.method === request.method) &&
        (armed.match.resource === undefined || armed.match.resource === request.resource),
    )
    if (!found) return undefined
    found.remaining--
    if (found.remaining <= 0) this.armed = this.armed.filter((armed) => armed !== found)
    return found.fault
  }
}
