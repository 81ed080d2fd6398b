import type { SandboxEvent, SandboxId } from '@cordon/core'
import { type Context, type ContextManager, context, ROOT_CONTEXT, trace } from '@opentelemetry/api'
import type { LoggerProvider as ApiLoggerProvider, Logger } from '@opentelemetry/api-logs'
import type { LoggerProvider as SdkLoggerProvider } from '@opentelemetry/sdk-logs'
import type { ReadableSpan } from '@opentelemetry/sdk-trace-base'
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest'
import {
  type CordonLogger,
  type CordonLoggerProvider,
  type CordonTelemetry,
  chainEventListeners,
  cordonTelemetry,
} from '../src/index.js'
import {
  childrenOf,
  hrTimeToMilliseconds,
  type InMemoryOtel,
  inMemoryOtel,
} from './in-memory-otel.js'

// The logs API's and the SDK's loggers fit cordon's structural logger types,
// so a host passes what it has (checked by `pnpm typecheck`).
const fitsLogger: (logger: Logger) => CordonLogger = (logger) => logger
const fitsApiProvider: (provider: ApiLoggerProvider) => CordonLoggerProvider = (provider) =>
  provider
const fitsSdkProvider: (provider: SdkLoggerProvider) => CordonLoggerProvider = (provider) =>
  provider

const BACKEND = 'container:docker'
const T0 = Date.UTC(2026, 0, 1)

function id(n: number): SandboxId {
  return `sbx_${String(n).padStart(26, '0')}` as SandboxId
}

function lifecycle(
  phase: Extract<SandboxEvent, { type: 'lifecycle' }>['phase'],
  sandbox: SandboxId | undefined,
  at: number,
  extra: Partial<Extract<SandboxEvent, { type: 'lifecycle' }>> = {},
): SandboxEvent {
  return {
    type: 'lifecycle',
    phase,
    ...(sandbox ? { sandboxId: sandbox } : {}),
    backend: BACKEND,
    timestamp: T0 + at,
    ...extra,
  }
}

function exec(
  phase: 'start' | 'end',
  sandbox: SandboxId,
  at: number,
  command: string,
  extra: Partial<Extract<SandboxEvent, { type: 'exec' }>> = {},
): SandboxEvent {
  return {
    type: 'exec',
    phase,
    sandboxId: sandbox,
    backend: BACKEND,
    timestamp: T0 + at,
    command,
    ...extra,
  }
}

const startMs = (span: ReadableSpan) => hrTimeToMilliseconds(span.startTime) - T0
const endMs = (span: ReadableSpan) => hrTimeToMilliseconds(span.endTime) - T0

describe('events in any order, for any sandbox', () => {
  let otel: InMemoryOtel
  let telemetry: CordonTelemetry
  const feed = (...events: SandboxEvent[]) => {
    for (const event of events) telemetry.onEvent(event)
  }
  const named = (name: string) => otel.spans().filter((span) => span.name === name)
  const sumOf = async (metric: string, attributes: Record<string, unknown> = {}) =>
    (await otel.points(metric))
      .filter((point) =>
        Object.entries(attributes).every(([key, value]) => point.attributes[key] === value),
      )
      .reduce((sum, point) => sum + (point.value as number), 0)

  beforeEach(() => {
    otel = inMemoryOtel()
    telemetry = cordonTelemetry({
      tracerProvider: otel.tracerProvider,
      meterProvider: otel.meterProvider,
      loggerProvider: otel.loggerProvider,
      maxTrackedSandboxes: 2,
    })
  })
  afterEach(async () => {
    await otel.shutdown()
  })

  it('the SDK loggers fit the structural logger types', () => {
    expect([fitsLogger, fitsApiProvider, fitsSdkProvider]).toHaveLength(3)
  })

  it('draws a whole life with the times the events carry', async () => {
    const a = id(1)
    feed(
      lifecycle('create.start', a, 0),
      lifecycle('create.ready', a, 800, {
        durationMs: 800,
        steps: { 'creating the container': 300 },
      }),
      exec('start', a, 1000, 'sh'),
      {
        type: 'file',
        operation: 'write',
        sandboxId: a,
        backend: BACKEND,
        timestamp: T0 + 1500,
        path: '/w/x',
        bytes: 5,
        durationMs: 40,
      },
      exec('end', a, 1600, 'sh', { exitCode: 0, timedOut: false, aborted: false, durationMs: 600 }),
      lifecycle('destroy.start', a, 2000),
      lifecycle('destroy.end', a, 2300, { durationMs: 300, endReason: 'destroyed' }),
    )
    const [root] = named('cordon.sandbox')
    expect(root).toBeDefined()
    expect([startMs(root!), endMs(root!)]).toEqual([0, 2300])
    expect(root!.attributes).toMatchObject({
      'cordon.sandbox.id': a,
      'cordon.sandbox.backend': BACKEND,
      'cordon.sandbox.end_reason': 'destroyed',
    })
    const children = childrenOf(otel.spans(), root)
    expect(children.map((span) => [span.name, startMs(span), endMs(span)])).toEqual([
      ['cordon.sandbox.create', 0, 800],
      ['cordon.exec', 1000, 1600],
      ['cordon.file.write', 1460, 1500],
      ['cordon.sandbox.destroy', 2000, 2300],
    ])
    expect(children[0]!.attributes['cordon.sandbox.create.step_ms.creating_the_container']).toBe(
      300,
    )
    expect(telemetry.trackedSandboxes).toBe(0)
    expect(await sumOf('cordon.sandbox.active')).toBe(0)
    expect(await sumOf('cordon.sandbox.ended', { 'cordon.sandbox.end_reason': 'destroyed' })).toBe(
      1,
    )
  })

  it('follows a sandbox first seen at an exec, and draws an exec end with no start from its duration', async () => {
    const a = id(1)
    feed(exec('start', a, 100, 'ls'))
    expect(telemetry.trackedSandboxes).toBe(1)
    feed(
      exec('end', a, 300, 'ls', { exitCode: 0, timedOut: false, aborted: false, durationMs: 200 }),
    )
    // A sandbox never seen, whose exec ends after its destroy was reported.
    const b = id(2)
    feed(
      exec('end', b, 900, 'cat', { exitCode: 1, timedOut: false, aborted: false, durationMs: 250 }),
    )
    expect(telemetry.trackedSandboxes).toBe(1)
    const [late] = otel.spans().filter((span) => span.attributes['cordon.sandbox.id'] === b)
    expect(late).toMatchObject({ name: 'cordon.exec', parentSpanContext: undefined })
    expect([startMs(late!), endMs(late!)]).toEqual([650, 900])
    expect(late!.attributes).toMatchObject({ 'process.command': 'cat', 'process.exit.code': 1 })
    // A non-zero exit is the command's answer, not an error.
    expect(late!.status.code).toBe(0)
    // The first sandbox's root is still open: its exec is the only span out.
    expect(named('cordon.exec')).toHaveLength(2)
    expect(named('cordon.sandbox')).toHaveLength(0)
  })

  it('a destroy without a create is its own short trace; active never goes below zero', async () => {
    const a = id(1)
    feed(
      lifecycle('destroy.start', a, 0),
      lifecycle('destroy.end', a, 50, { durationMs: 50, endReason: 'lost' }),
    )
    const [root] = named('cordon.sandbox')
    expect(root!.attributes['cordon.sandbox.end_reason']).toBe('lost')
    expect(childrenOf(otel.spans(), root).map((span) => span.name)).toEqual([
      'cordon.sandbox.destroy',
    ])
    expect(await sumOf('cordon.sandbox.active')).toBe(0)
    // A destroy.end with nothing before it at all.
    feed(lifecycle('destroy.end', id(2), 90, { durationMs: 30, endReason: 'idle' }))
    const drawn = named('cordon.sandbox.destroy').find(
      (span) => span.attributes['cordon.sandbox.id'] === id(2),
    )
    expect([startMs(drawn!), endMs(drawn!)]).toEqual([60, 90])
    expect(await sumOf('cordon.sandbox.ended')).toBe(2)
  })

  it('follows at most maxTrackedSandboxes; the least recently seen is ended as evicted', async () => {
    const [a, b, c] = [id(1), id(2), id(3)]
    feed(
      lifecycle('create.start', a, 0),
      lifecycle('create.ready', a, 10, { durationMs: 10 }),
      lifecycle('create.start', b, 20),
      lifecycle('create.ready', b, 30, { durationMs: 10 }),
      exec('start', a, 40, 'sleep'), // a is now seen more recently than b
      lifecycle('create.start', c, 50),
      lifecycle('create.ready', c, 60, { durationMs: 10 }),
    )
    expect(telemetry.trackedSandboxes).toBe(2)
    const [evicted] = named('cordon.sandbox')
    expect(evicted!.attributes).toMatchObject({
      'cordon.sandbox.id': b,
      'cordon.telemetry.unfinished': 'evicted',
    })
    expect(await sumOf('cordon.sandbox.active')).toBe(2)
    // b's end, when it comes, is drawn on its own and subtracts nothing.
    feed(lifecycle('destroy.end', b, 100, { durationMs: 5, endReason: 'destroyed' }))
    expect(await sumOf('cordon.sandbox.active')).toBe(2)
    telemetry.endOpenSpans()
    expect(telemetry.trackedSandboxes).toBe(0)
    const closed = otel
      .spans()
      .filter((span) => span.attributes['cordon.telemetry.unfinished'] === 'closed')
    expect(closed.map((span) => span.name).sort()).toEqual([
      'cordon.exec',
      'cordon.sandbox',
      'cordon.sandbox',
    ])
    expect(await sumOf('cordon.sandbox.active')).toBe(0)
  })

  it('matches concurrent execs of one command by when each started', () => {
    const a = id(1)
    feed(
      lifecycle('create.start', a, 0),
      exec('start', a, 100, 'sleep'),
      exec('start', a, 200, 'sleep'),
      // The one that started at 200 ends first.
      exec('end', a, 500, 'sleep', {
        exitCode: 0,
        timedOut: false,
        aborted: false,
        durationMs: 300,
      }),
      exec('end', a, 900, 'sleep', {
        exitCode: 0,
        timedOut: true,
        aborted: false,
        durationMs: 800,
      }),
    )
    const spans = named('cordon.exec').map((span) => [startMs(span), endMs(span), span.status.code])
    expect(spans).toEqual([
      [200, 500, 0],
      [100, 900, 2],
    ])
  })

  it('draws a pause and a resume as spans of the sandbox, the resume with the time paused', () => {
    const a = id(1)
    feed(
      lifecycle('create.start', a, 0),
      lifecycle('create.ready', a, 500, { durationMs: 500 }),
      lifecycle('pause', a, 1100, { durationMs: 100 }),
      lifecycle('resume', a, 9050, { durationMs: 50, pausedMs: 8050 }),
      lifecycle('pause', a, 9500, {
        durationMs: 20,
        error: {
          name: 'SandboxBackendUnavailableError',
          code: 'BACKEND_UNAVAILABLE',
          message: 'engine down',
        },
      }),
      lifecycle('destroy.start', a, 10_000),
      lifecycle('destroy.end', a, 10_200, { durationMs: 200, endReason: 'destroyed' }),
    )
    const [root] = named('cordon.sandbox')
    const children = childrenOf(otel.spans(), root)
    expect(
      children.map((span) => [
        span.name,
        startMs(span),
        endMs(span),
        span.attributes['cordon.sandbox.paused_ms'],
        span.attributes['error.type'],
      ]),
    ).toEqual([
      ['cordon.sandbox.create', 0, 500, undefined, undefined],
      ['cordon.sandbox.pause', 1000, 1100, undefined, undefined],
      ['cordon.sandbox.resume', 9000, 9050, 8050, undefined],
      ['cordon.sandbox.pause', 9480, 9500, undefined, 'BACKEND_UNAVAILABLE'],
      ['cordon.sandbox.destroy', 10_000, 10_200, undefined, undefined],
    ])
  })

  it('a failed create ends the trace in error; a cleanup report does not end the create', async () => {
    const a = id(1)
    feed(
      lifecycle('create.start', a, 0),
      lifecycle('create.failed', a, 100, {
        error: { name: 'CleanupError', message: 'container remove failed: busy' },
      }),
      lifecycle('create.failed', a, 400, {
        durationMs: 400,
        error: {
          name: 'SandboxError',
          code: 'SANDBOX_READY_TIMEOUT',
          message: 'not ready in time',
        },
      }),
    )
    const [root] = named('cordon.sandbox')
    expect(root!.status).toEqual({ code: 2, message: 'not ready in time' })
    const children = childrenOf(otel.spans(), root)
    expect(
      children.map((span) => [
        span.name,
        startMs(span),
        endMs(span),
        span.attributes['error.type'],
      ]),
    ).toEqual([
      ['cordon.sandbox.create', 0, 400, 'SANDBOX_READY_TIMEOUT'],
      ['cordon.sandbox.cleanup', 100, 100, 'CleanupError'],
    ])
    expect(telemetry.trackedSandboxes).toBe(0)
    const [point] = await otel.points('cordon.sandbox.create.duration')
    expect(point!.attributes).toEqual({
      'cordon.sandbox.backend': BACKEND,
      'error.type': 'SANDBOX_READY_TIMEOUT',
    })
    expect(await sumOf('cordon.sandbox.active')).toBe(0)
  })

  it('counts an OOM kill once when an oom event precedes an out-of-memory end', async () => {
    const [a, b] = [id(1), id(2)]
    feed(
      lifecycle('create.start', a, 0),
      lifecycle('create.ready', a, 10, { durationMs: 10 }),
      lifecycle('oom', a, 20),
      lifecycle('ended', a, 30, { endReason: 'out-of-memory' }),
      lifecycle('destroy.start', a, 31),
      lifecycle('destroy.end', a, 40, { durationMs: 9, endReason: 'out-of-memory' }),
      // An out-of-memory end with no oom event before it counts by itself.
      lifecycle('create.start', b, 100),
      lifecycle('create.ready', b, 110, { durationMs: 10 }),
      lifecycle('destroy.start', b, 120),
      lifecycle('destroy.end', b, 130, { durationMs: 10, endReason: 'out-of-memory' }),
    )
    expect(await sumOf('cordon.sandbox.oom_kills')).toBe(2)
    const root = named('cordon.sandbox').find((span) => span.attributes['cordon.sandbox.id'] === a)
    expect(root!.events.map((event) => [event.name, event.attributes])).toEqual([
      ['cordon.sandbox.oom', {}],
      ['cordon.sandbox.ended', { 'cordon.sandbox.end_reason': 'out-of-memory' }],
    ])
  })

  it('a destroy retried after a failed attempt supersedes the first span', () => {
    const a = id(1)
    feed(
      lifecycle('create.start', a, 0),
      lifecycle('destroy.start', a, 10),
      lifecycle('destroy.start', a, 50),
      lifecycle('destroy.end', a, 70, { durationMs: 20, endReason: 'destroyed' }),
    )
    const destroys = named('cordon.sandbox.destroy').map((span) => [
      startMs(span),
      endMs(span),
      span.attributes['cordon.telemetry.unfinished'] ?? null,
    ])
    expect(destroys).toEqual([
      [10, 50, 'superseded'],
      [50, 70, null],
    ])
    // The create that never reported its end is ended with the sandbox.
    expect(named('cordon.sandbox.create')[0]!.attributes['cordon.telemetry.unfinished']).toBe(
      'sandbox-ended',
    )
  })

  it('never throws into the provider, even when the tracer does', () => {
    const broken = cordonTelemetry({
      tracer: {
        startSpan: () => {
          throw new Error('exporter down')
        },
        startActiveSpan: () => {
          throw new Error('exporter down')
        },
      },
      meterProvider: otel.meterProvider,
    })
    expect(() => broken.onEvent(lifecycle('create.start', id(1), 0))).not.toThrow()
  })

  it('refuses a limit that is not a positive integer', () => {
    expect(() => cordonTelemetry({ maxTrackedSandboxes: 0 })).toThrow(RangeError)
  })
})

/**
 * The smallest context manager: a stack for synchronous calls. A host's SDK
 * registers an AsyncLocalStorage one; for events reported synchronously
 * inside the host's call (as `create.start` is) they agree.
 */
class StackContextManager implements ContextManager {
  private stack: Context[] = []
  active(): Context {
    return this.stack.at(-1) ?? ROOT_CONTEXT
  }
  with<A extends unknown[], F extends (...args: A) => ReturnType<F>>(
    active: Context,
    fn: F,
    thisArg?: ThisParameterType<F>,
    ...args: A
  ): ReturnType<F> {
    this.stack.push(active)
    try {
      return fn.call(thisArg, ...args)
    } finally {
      this.stack.pop()
    }
  }
  bind<T>(_context: Context, target: T): T {
    return target
  }
  enable(): this {
    return this
  }
  disable(): this {
    this.stack = []
    return this
  }
}

describe("a sandbox's trace joins the host's", () => {
  beforeAll(() => {
    context.setGlobalContextManager(new StackContextManager())
  })
  afterAll(() => {
    context.disable()
  })

  it('the root span is a child of the span active when the create started', async () => {
    const otel = inMemoryOtel()
    const telemetry = cordonTelemetry({ tracerProvider: otel.tracerProvider })
    const host = otel.tracerProvider.getTracer('host').startSpan('host.request')
    context.with(trace.setSpan(context.active(), host), () => {
      telemetry.onEvent(lifecycle('create.start', id(1), 0))
    })
    telemetry.onEvent(lifecycle('destroy.start', id(1), 10))
    telemetry.onEvent(
      lifecycle('destroy.end', id(1), 20, { durationMs: 10, endReason: 'destroyed' }),
    )
    host.end()
    const root = otel.spans().find((span) => span.name === 'cordon.sandbox')
    expect(root!.parentSpanContext?.spanId).toBe(host.spanContext().spanId)
    expect(root!.spanContext().traceId).toBe(host.spanContext().traceId)
    await otel.shutdown()
  })
})

describe('chainEventListeners', () => {
  it('calls every listener in order, past one that throws', () => {
    const seen: string[] = []
    const listener = chainEventListeners(
      () => seen.push('first'),
      () => {
        throw new Error('broken host hook')
      },
      undefined,
      () => seen.push('third'),
    )
    listener(lifecycle('create.start', id(1), 0))
    expect(seen).toEqual(['first', 'third'])
  })
})
