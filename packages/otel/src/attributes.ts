/**
 * Attribute names. OpenTelemetry's semantic conventions are used where one
 * fits (`error.type`, `process.command`, `process.exit.code`, `file.path`,
 * `server.address`, `server.port`, `network.peer.address`); the rest are
 * cordon's own, under `cordon.`. They are spelled out here rather than
 * imported from `@opentelemetry/semantic-conventions`: these names are
 * stable, and the package then needs nothing but `@opentelemetry/api`.
 */
export const ATTR = {
  sandboxId: 'cordon.sandbox.id',
  backend: 'cordon.sandbox.backend',
  endReason: 'cordon.sandbox.end_reason',
  /** On `cordon.sandbox.resume`: how long the sandbox was paused, in ms. */
  pausedMs: 'cordon.sandbox.paused_ms',
  /** Prefix of one attribute per create step, in milliseconds. */
  createStepPrefix: 'cordon.sandbox.create.step_ms.',
  errorType: 'error.type',
  command: 'process.command',
  exitCode: 'process.exit.code',
  execTimedOut: 'cordon.exec.timed_out',
  execAborted: 'cordon.exec.aborted',
  execOutcome: 'cordon.exec.outcome',
  fileOperation: 'cordon.file.operation',
  filePath: 'file.path',
  fileBytes: 'cordon.file.bytes',
  fileCount: 'cordon.file.count',
  egressKind: 'cordon.egress.kind',
  egressDecision: 'cordon.egress.decision',
  egressReason: 'cordon.egress.reason',
  egressBytesUp: 'cordon.egress.bytes_up',
  egressBytesDown: 'cordon.egress.bytes_down',
  egressDurationMs: 'cordon.egress.duration_ms',
  serverAddress: 'server.address',
  serverPort: 'server.port',
  peerAddress: 'network.peer.address',
  /** On a span ended by cordon's telemetry rather than by its own event (see `unfinishedBecause`). */
  unfinished: 'cordon.telemetry.unfinished',
} as const

/** Why a span was ended without the event that would have ended it. */
export type UnfinishedBecause =
  /** The sandbox ended first (an exec whose end was never reported, a destroy retried). */
  | 'sandbox-ended'
  /** More sandboxes were tracked than `maxTrackedSandboxes`; this one was the least recently seen. */
  | 'evicted'
  /** The host called `endOpenSpans()`. */
  | 'closed'
  /** Another `destroy.start` arrived before this one's `destroy.end` (the first attempt failed). */
  | 'superseded'
