export { chainEventListeners } from './chain-listeners.js'
export {
  type CordonTelemetry,
  type CordonTelemetryOptions,
  cordonTelemetry,
  DEFAULT_MAX_TRACKED_SANDBOXES,
  INSTRUMENTATION_SCOPE,
} from './cordon-telemetry.js'
export type { CordonLogger, CordonLoggerProvider, CordonLogRecord } from './log-emitter.js'
