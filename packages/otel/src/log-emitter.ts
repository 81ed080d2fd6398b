import type { Attributes, Context, TimeInput } from '@opentelemetry/api'

/**
 * The part of `@opentelemetry/api-logs`' `Logger` that cordon uses. It is
 * declared here, structurally, so that the package depends on
 * `@opentelemetry/api` alone: a host that wants logs passes the `Logger` or
 * `LoggerProvider` it already has (from `@opentelemetry/api-logs`'
 * `logs.getLoggerProvider()` or from the SDK), and a host that does not need
 * not install the logs API at all.
 */
export interface CordonLogRecord {
  readonly eventName?: string
  readonly timestamp?: TimeInput
  readonly severityNumber?: number
  readonly severityText?: string
  readonly body?: string
  readonly attributes?: Attributes
  readonly context?: Context
}

export interface CordonLogger {
  emit(logRecord: CordonLogRecord): void
}

export interface CordonLoggerProvider {
  getLogger(name: string, version?: string): CordonLogger
}

/** OpenTelemetry's severity numbers (the log data model's, fixed by the specification). */
export const SEVERITY = {
  INFO: { number: 9, text: 'INFO' },
  WARN: { number: 13, text: 'WARN' },
} as const
