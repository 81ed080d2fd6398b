/**
 * The one structured event the proxy reports per forwarded request or tunnel.
 * It is core's `SandboxEgressEvent`, so a provider can pass it straight to its
 * `onEvent` hook, plus who asked: the client's source address and the label it
 * was registered under.
 */
import { type EgressReasonCode, isSandboxId, type SandboxEgressEvent } from '@cordon/core'

export interface EgressDecisionEvent extends SandboxEgressEvent {
  /** Source address of the client connection, IPv4-mapped forms unwrapped. */
  readonly clientAddress: string
  /** The label given to `setClientPolicy` for this address (e.g. a sandbox id). */
  readonly clientId?: string
  /** HTTP status the proxy answered with, for `http` events and denied tunnels. */
  readonly status?: number
  /** Why an allowed exchange ended early (upstream reset, client gone, idle). */
  readonly error?: string
}

export type EgressDecisionListener = (event: EgressDecisionEvent) => void

export interface DecisionFields {
  readonly kind: 'http' | 'connect'
  readonly host: string
  readonly port: number
  readonly reason: EgressReasonCode
  readonly clientAddress: string
  readonly clientId?: string | undefined
  readonly address?: string | undefined
  readonly bytesUp?: number
  readonly bytesDown?: number
  readonly startedAt: number
  readonly status?: number | undefined
  readonly error?: string | undefined
}

export function buildDecisionEvent(fields: DecisionFields): EgressDecisionEvent {
  const now = Date.now()
  const event: {
    -readonly [K in keyof EgressDecisionEvent]: EgressDecisionEvent[K]
  } = {
    type: 'egress',
    timestamp: now,
    kind: fields.kind,
    host: fields.host,
    port: fields.port,
    decision: fields.reason === 'allowed' ? 'allow' : 'deny',
    reason: fields.reason,
    bytesUp: fields.bytesUp ?? 0,
    bytesDown: fields.bytesDown ?? 0,
    durationMs: Math.max(0, now - fields.startedAt),
    clientAddress: fields.clientAddress,
  }
  if (fields.clientId !== undefined) {
    event.clientId = fields.clientId
    if (isSandboxId(fields.clientId)) event.sandboxId = fields.clientId
  }
  if (fields.address !== undefined) event.address = fields.address
  if (fields.status !== undefined) event.status = fields.status
  if (fields.error !== undefined) event.error = fields.error
  return event
}

/** A listener that throws must not take the proxy down or skip the response. */
export function safeListener(listener: EgressDecisionListener | undefined): EgressDecisionListener {
  if (listener === undefined) return () => {}
  return (event) => {
    try {
      listener(event)
    } catch {
      // Reporting is best effort; the decision has already been enforced.
    }
  }
}
