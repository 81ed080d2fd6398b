import type { DecisionFields } from './decision-event.js'
import { buildDecisionEvent } from './decision-event.js'
import { canonicalClientAddress } from './policy-state.js'
import type { ProxyRuntime } from './proxy-runtime.js'

type ReportFields = Omit<DecisionFields, 'kind' | 'clientAddress' | 'clientId' | 'startedAt'>

/**
 * Who one request or tunnel belongs to, and the one way to report decisions
 * about it. The client is looked up before anything else, so every event,
 * refusals of malformed requests included, names the client that asked.
 */
export function exchangeClient(
  runtime: Pick<ProxyRuntime, 'state' | 'emit'>,
  kind: DecisionFields['kind'],
  remoteAddress: string | undefined,
) {
  const startedAt = Date.now()
  const clientAddress = canonicalClientAddress(remoteAddress) ?? ''
  const found = runtime.state.clientFor(clientAddress)
  const clientId = found.ok ? found.client.clientId : undefined
  return {
    startedAt,
    clientAddress,
    found,
    clientId,
    report: (fields: ReportFields): void => {
      runtime.emit(buildDecisionEvent({ kind, clientAddress, clientId, startedAt, ...fields }))
    },
  }
}
