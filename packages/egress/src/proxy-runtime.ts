/**
 * What the request handlers share with the proxy that owns them. Kept apart
 * from `egress-proxy.ts` so the handlers depend on this narrow view, not on
 * the class.
 */
import type { Socket } from 'node:net'
import type { AdmissionContext, TunnelSlots } from './admission.js'
import type { EgressDecisionListener } from './decision-event.js'
import type { PolicyState } from './policy-state.js'
import type { TunnelReadBuffers } from './tunnel-read-buffers.js'

export interface ProxyRuntime extends AdmissionContext {
  readonly state: PolicyState
  readonly slots: TunnelSlots
  readonly emit: EgressDecisionListener
  /** Upstream read buffers, reused from one tunnel to the next. */
  readonly readBuffers: TunnelReadBuffers
  /** Registers a socket that `close()` must destroy (tunnel ends, upstream legs). */
  readonly track: (socket: Socket) => void
}
