import type { HrTime } from '@opentelemetry/api'
import {
  InMemoryLogRecordExporter,
  LoggerProvider,
  type ReadableLogRecord,
  SimpleLogRecordProcessor,
} from '@opentelemetry/sdk-logs'
import {
  AggregationTemporality,
  type DataPoint,
  InMemoryMetricExporter,
  MeterProvider,
  PeriodicExportingMetricReader,
} from '@opentelemetry/sdk-metrics'
import {
  BasicTracerProvider,
  InMemorySpanExporter,
  type ReadableSpan,
  SimpleSpanProcessor,
} from '@opentelemetry/sdk-trace-base'

/**
 * The OpenTelemetry SDK with its in-memory exporters: what a host would set
 * up, with exporters a test can read back.
 */
export function inMemoryOtel() {
  const spanExporter = new InMemorySpanExporter()
  const tracerProvider = new BasicTracerProvider({
    spanProcessors: [new SimpleSpanProcessor(spanExporter)],
  })
  const metricExporter = new InMemoryMetricExporter(AggregationTemporality.CUMULATIVE)
  const metricReader = new PeriodicExportingMetricReader({
    exporter: metricExporter,
    // Long enough never to fire on its own: the test flushes when it reads.
    exportIntervalMillis: 3_600_000,
  })
  const meterProvider = new MeterProvider({ readers: [metricReader] })
  const logExporter = new InMemoryLogRecordExporter()
  const loggerProvider = new LoggerProvider({
    processors: [new SimpleLogRecordProcessor({ exporter: logExporter })],
  })

  return {
    tracerProvider,
    meterProvider,
    loggerProvider,
    spans: (): ReadableSpan[] => spanExporter.getFinishedSpans(),
    logs: (): ReadableLogRecord[] => logExporter.getFinishedLogRecords(),
    /** The points of one metric, after a collection (cumulative, so each read sees all so far). */
    async points(name: string): Promise<Array<DataPoint<unknown>>> {
      metricExporter.reset()
      await metricReader.forceFlush()
      const found = metricExporter
        .getMetrics()
        .flatMap((resource) => resource.scopeMetrics)
        .flatMap((scope) => scope.metrics)
        .filter((metric) => metric.descriptor.name === name)
      return found.flatMap((metric) => metric.dataPoints as Array<DataPoint<unknown>>)
    },
    /** The unit a metric was declared with. */
    async unitOf(name: string): Promise<string | undefined> {
      metricExporter.reset()
      await metricReader.forceFlush()
      return metricExporter
        .getMetrics()
        .flatMap((resource) => resource.scopeMetrics)
        .flatMap((scope) => scope.metrics)
        .find((metric) => metric.descriptor.name === name)?.descriptor.unit
    },
    async shutdown(): Promise<void> {
      await Promise.all([
        tracerProvider.shutdown(),
        meterProvider.shutdown(),
        loggerProvider.shutdown(),
      ])
    },
  }
}

export type InMemoryOtel = ReturnType<typeof inMemoryOtel>

/** An SDK time ([seconds, nanoseconds]) in milliseconds. */
export function hrTimeToMilliseconds([seconds, nanoseconds]: HrTime): number {
  return seconds * 1000 + nanoseconds / 1e6
}

/** Spans whose parent is `parent` (the roots when it is undefined), oldest first. */
export function childrenOf(spans: readonly ReadableSpan[], parent?: ReadableSpan): ReadableSpan[] {
  return spans
    .filter((span) =>
      parent === undefined
        ? span.parentSpanContext === undefined
        : span.parentSpanContext?.spanId === parent.spanContext().spanId,
    )
    .sort((a, b) => hrTimeToMilliseconds(a.startTime) - hrTimeToMilliseconds(b.startTime))
}

/**
 * The trace as an indented tree, one span a line with its duration and
 * attributes, for a person to read (the package README shows one).
 * `hideOnChildren` leaves out attributes that children repeat from the root.
 */
export function renderTrace(
  spans: readonly ReadableSpan[],
  hideOnChildren: readonly string[] = [],
): string {
  const lines: string[] = []
  const visit = (span: ReadableSpan, prefix: string, last: boolean, depth: number) => {
    const duration = hrTimeToMilliseconds(span.duration).toFixed(1)
    const attributes = Object.entries(span.attributes)
      .filter(([key]) => depth === 0 || !hideOnChildren.includes(key))
      .map(([key, value]) => `${key}=${JSON.stringify(value)}`)
      .join(' ')
    const status = span.status.code === 2 ? ` ERROR(${span.status.message ?? ''})` : ''
    const branch = depth === 0 ? '' : last ? '└─ ' : '├─ '
    lines.push(`${prefix}${branch}${span.name} ${duration} ms${status}  ${attributes}`.trimEnd())
    const childPrefix = depth === 0 ? '' : `${prefix}${last ? '   ' : '│  '}`
    for (const event of span.events) {
      const eventAttributes = Object.entries(event.attributes ?? {})
        .map(([key, value]) => `${key}=${JSON.stringify(value)}`)
        .join(' ')
      lines.push(`${childPrefix}   · event ${event.name} ${eventAttributes}`.trimEnd())
    }
    const children = childrenOf(spans, span)
    children.forEach((child, index) => {
      visit(child, childPrefix, index === children.length - 1, depth + 1)
    })
  }
  for (const root of childrenOf(spans)) visit(root, '', true, 0)
  return lines.join('\n')
}
