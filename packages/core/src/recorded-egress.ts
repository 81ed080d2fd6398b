import type { EgressPolicy, EgressPolicyKind } from './egress-policy.js'

/** An egress policy as a snapshot records it or a backend reports it: a resolver's function is not kept. */
export interface RecordedEgress {
  readonly kind: EgressPolicyKind
  readonly allowedHosts?: readonly string[]
}

/**
 * The policy a recorded one stands for, for a sandbox made to match it (a
 * create from a snapshot, a fork of a connected sandbox); undefined for a
 * `resolver`, whose function no record holds: the caller refuses, naming
 * `egress`, rather than guess a list.
 */
export function policyOfRecord(recorded: RecordedEgress): EgressPolicy | undefined {
  switch (recorded.kind) {
    case 'resolver':
      return undefined
    case 'static':
      return { kind: 'static', allowedHosts: [...(recorded.allowedHosts ?? [])] }
    default:
      return { kind: recorded.kind }
  }
}
