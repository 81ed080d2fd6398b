import type { SandboxEgressEvent } from '@cordon/core'
import type { Attributes } from '@opentelemetry/api'
import { ATTR } from './attributes.js'
import { type CordonLogger, SEVERITY } from './log-emitter.js'
import type { TrackedSandbox } from './tracked-sandbox.js'

/**
 * One log record per egress decision: INFO for an allowed request or
 * tunnel, WARN for a denied one (a sandbox reaching for what its policy
 * does not allow is what an operator looks for). The record carries the
 * sandbox's trace context, so a backend shows it inside the sandbox's trace.
 */
export class EgressLogRecorder {
  constructor(private readonly logger: CordonLogger) {}

  record(event: SandboxEgressEvent, tracked: TrackedSandbox | undefined): void {
    const severity = event.decision === 'allow' ? SEVERITY.INFO : SEVERITY.WARN
    const attributes: Attributes = {
      [ATTR.egressDecision]: event.decision,
      [ATTR.egressReason]: event.reason,
      [ATTR.egressKind]: event.kind,
      [ATTR.serverAddress]: event.host,
      [ATTR.serverPort]: event.port,
      [ATTR.egressBytesUp]: event.bytesUp,
      [ATTR.egressBytesDown]: event.bytesDown,
      [ATTR.egressDurationMs]: event.durationMs,
    }
    if (event.sandboxId !== undefined) attributes[ATTR.sandboxId] = event.sandboxId
    if (event.address !== undefined) attributes[ATTR.peerAddress] = event.address
    this.logger.emit({
      eventName: 'cordon.egress.decision',
      timestamp: event.timestamp,
      severityNumber: severity.number,
      severityText: severity.text,
      body: `egress ${event.decision} ${event.kind} ${event.host}:${event.port} (${event.reason})`,
      attributes,
      ...(tracked ? { context: tracked.context } : {}),
    })
  }
}
