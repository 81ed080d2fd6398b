import { execFileSync } from 'node:child_process'
import { mkdirSync, writeFileSync } from 'node:fs'
import { createServer, type Server } from 'node:http'
import type { AddressInfo } from 'node:net'
import type { CordonSandbox, CordonSandboxProvider, SandboxEvent } from '@cordon/core'
import { context, type Span } from '@opentelemetry/api'
import type { ReadableSpan } from '@opentelemetry/sdk-trace-base'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { chainEventListeners, cordonTelemetry } from '../src/index.js'
import { AsyncLocalContextManager } from './async-context-manager.js'
import { dockerProvider } from './docker-provider.js'
import {
  childrenOf,
  hrTimeToMilliseconds,
  type InMemoryOtel,
  inMemoryOtel,
  renderTrace,
} from './in-memory-otel.js'

/** The host as a container on the default bridge reaches it (where the gateway dials upstreams). */
const HOST_BRIDGE_ADDRESS = '172.17.0.1'

/** Events (and so telemetry) of egress arrive when an exchange closes, just after the client saw its reply. */
async function eventually<T>(read: () => Promise<T> | T, done: (value: T) => boolean): Promise<T> {
  let value = await read()
  for (let attempt = 0; attempt < 60 && !done(value); attempt++) {
    await new Promise((resolve) => setTimeout(resolve, 100))
    value = await read()
  }
  return value
}

/** The sandbox's root span and its children, oldest first. */
function traceOf(otel: InMemoryOtel, sandbox: CordonSandbox) {
  const root = otel
    .spans()
    .find(
      (span) =>
        span.name === 'cordon.sandbox' && span.attributes['cordon.sandbox.id'] === sandbox.id,
    )
  expect(root, `root span of ${sandbox.id}`).toBeDefined()
  return { root: root!, children: childrenOf(otel.spans(), root) }
}

const within = (child: ReadableSpan, parent: ReadableSpan) =>
  hrTimeToMilliseconds(child.startTime) >= hrTimeToMilliseconds(parent.startTime) &&
  hrTimeToMilliseconds(child.endTime) <= hrTimeToMilliseconds(parent.endTime)

describe('telemetry of real Docker sandboxes, read back through the SDK in-memory exporters', () => {
  const otel = inMemoryOtel()
  const telemetry = cordonTelemetry({
    tracerProvider: otel.tracerProvider,
    meterProvider: otel.meterProvider,
    loggerProvider: otel.loggerProvider,
  })
  const events: SandboxEvent[] = []
  let provider: CordonSandboxProvider
  let upstream: Server
  let upstreamPort: number

  const sum = async (metric: string, attributes: Record<string, unknown> = {}) =>
    (await otel.points(metric))
      .filter((point) =>
        Object.entries(attributes).every(([key, value]) => point.attributes[key] === value),
      )
      .reduce((total, point) => total + (point.value as number), 0)
  const histogramCount = async (metric: string, attributes: Record<string, unknown> = {}) =>
    (await otel.points(metric))
      .filter((point) =>
        Object.entries(attributes).every(([key, value]) => point.attributes[key] === value),
      )
      .reduce((total, point) => total + (point.value as { count: number }).count, 0)

  beforeAll(async () => {
    upstream = createServer((request, response) => response.end(`upstream saw ${request.url}\n`))
    upstreamPort = await new Promise<number>((resolve) =>
      upstream.listen(0, '0.0.0.0', () => resolve((upstream.address() as AddressInfo).port)),
    )
    provider = dockerProvider(
      // The host keeps a listener of its own beside the telemetry.
      chainEventListeners(telemetry.onEvent, (event) => events.push(event)),
      {
        gatewayHosts: { 'upstream.test': HOST_BRIDGE_ADDRESS },
        gatewayAllowedPorts: [upstreamPort, 80],
      },
      ['upstream.test'],
    )
  })

  afterAll(async () => {
    await provider?.close()
    telemetry.endOpenSpans()
    await otel.shutdown()
    upstream?.close()
  })

  it('draws one trace per sandbox: create, file operations, execs and destroy under a root span', async () => {
    const activeBefore = await sum('cordon.sandbox.active')
    const sandbox = await provider.create()
    expect(await sum('cordon.sandbox.active')).toBe(activeBefore + 1)
    await sandbox.writeFile('hello.txt', 'hello from the host\n')
    expect((await sandbox.readFile('hello.txt')).toString()).toBe('hello from the host\n')
    const ran = await sandbox.exec('sh', ['-c', 'cat hello.txt; exit 3'])
    expect(ran.exitCode).toBe(3)
    const slow = await sandbox.exec('sleep', ['30'], { timeout: 500 })
    expect(slow.timedOut).toBe(true)
    await sandbox.destroy()

    const { root, children } = traceOf(otel, sandbox)
    expect(root.parentSpanContext).toBeUndefined()
    expect(root.attributes).toMatchObject({
      'cordon.sandbox.id': sandbox.id,
      'cordon.sandbox.backend': 'container:docker',
      'cordon.sandbox.end_reason': 'destroyed',
    })
    expect(children.map((span) => span.name)).toEqual([
      'cordon.sandbox.create',
      'cordon.file.write',
      'cordon.file.read',
      'cordon.exec',
      'cordon.exec',
      'cordon.sandbox.destroy',
    ])
    for (const child of children) {
      expect(child.spanContext().traceId).toBe(root.spanContext().traceId)
      expect(within(child, root), `${child.name} inside the sandbox's span`).toBe(true)
    }
    const [create, write, read, exec, timedOut, destroy] = children as [
      ReadableSpan,
      ReadableSpan,
      ReadableSpan,
      ReadableSpan,
      ReadableSpan,
      ReadableSpan,
    ]
    expect(create.status.code).toBe(0)
    // The create's steps, as the Docker backend timed them.
    expect(
      create.attributes['cordon.sandbox.create.step_ms.waiting_for_the_agent'],
    ).toBeGreaterThan(0)
    expect(
      create.attributes['cordon.sandbox.create.step_ms.starting_the_container'],
    ).toBeGreaterThan(0)
    expect(write.attributes).toMatchObject({
      'cordon.file.operation': 'write',
      'file.path': expect.stringMatching(/hello\.txt$/),
      'cordon.file.bytes': 20,
    })
    expect(read.attributes).toMatchObject({ 'cordon.file.operation': 'read' })
    expect(exec.attributes).toMatchObject({
      'process.command': 'sh',
      'process.exit.code': 3,
      'cordon.exec.outcome': 'exited',
      'cordon.exec.timed_out': false,
    })
    expect(exec.status.code).toBe(0)
    expect(timedOut.attributes).toMatchObject({
      'process.command': 'sleep',
      'cordon.exec.timed_out': true,
      'error.type': 'timed-out',
    })
    expect(timedOut.status.code).toBe(2)
    // The timeout ended the exec after about half a second, not the command's thirty
    // (the bound leaves room for a loaded engine).
    expect(hrTimeToMilliseconds(timedOut.duration)).toBeGreaterThanOrEqual(450)
    expect(hrTimeToMilliseconds(timedOut.duration)).toBeLessThan(15_000)
    expect(destroy.attributes['cordon.sandbox.end_reason']).toBe('destroyed')

    expect(await sum('cordon.sandbox.active')).toBe(activeBefore)
    expect(await histogramCount('cordon.sandbox.create.duration')).toBeGreaterThanOrEqual(1)
    expect(
      await histogramCount('cordon.exec.duration', { 'cordon.exec.outcome': 'timed-out' }),
    ).toBe(1)
    expect(await histogramCount('cordon.exec.duration', { 'cordon.exec.outcome': 'exited' })).toBe(
      1,
    )
    expect(await otel.unitOf('cordon.exec.duration')).toBe('s')
    expect(
      await sum('cordon.sandbox.ended', { 'cordon.sandbox.end_reason': 'destroyed' }),
    ).toBeGreaterThanOrEqual(1)
    // Nothing left behind: the sandbox is forgotten once it ends.
    expect(telemetry.trackedSandboxes).toBe(0)

    // The README's "trace from a demo run" is this trace; the ids change every run.
    mkdirSync('test-results', { recursive: true })
    const trace = otel
      .spans()
      .filter((span) => span.spanContext().traceId === root.spanContext().traceId)
    writeFileSync(
      'test-results/demo-trace.txt',
      `${renderTrace(trace, ['cordon.sandbox.id', 'cordon.sandbox.backend'])}\n`,
    )
  })

  it('a command refused at start: its exec span ends when the exec threw, with error status and error.type', async () => {
    const sandbox = await provider.create()
    try {
      const error = await sandbox
        .exec('true', [], { cwd: '/etc/passwd/x' })
        .catch((caught: unknown) => caught)
      expect(error).toMatchObject({ code: 'PATH_REFUSED' })
      // Ended before the sandbox was, so already exported.
      const refused = otel
        .spans()
        .find(
          (span) =>
            span.name === 'cordon.exec' && span.attributes['cordon.sandbox.id'] === sandbox.id,
        )
      expect(refused, 'the refused exec span, ended').toBeDefined()
      expect(refused!.attributes).toMatchObject({
        'process.command': 'true',
        'cordon.exec.outcome': 'failed',
        'error.type': 'PATH_REFUSED',
      })
      expect(refused!.attributes['cordon.telemetry.unfinished']).toBeUndefined()
      expect(refused!.status.code).toBe(2)
    } finally {
      await sandbox.destroy()
    }
  })

  it('a detached process: its exec span ends detached, without an error', async () => {
    const sandbox = await provider.create()
    try {
      const process = await sandbox.start('sleep', ['30'])
      await process.detach()
      const detached = otel
        .spans()
        .find(
          (span) =>
            span.name === 'cordon.exec' && span.attributes['cordon.sandbox.id'] === sandbox.id,
        )
      expect(detached, 'the detached exec span, ended').toBeDefined()
      expect(detached!.attributes).toMatchObject({
        'process.command': 'sleep',
        'cordon.exec.outcome': 'detached',
      })
      expect(detached!.attributes['error.type']).toBeUndefined()
      expect(detached!.status.code).toBe(0)
    } finally {
      await sandbox.destroy()
    }
  })

  it('records the end reason of a sandbox whose lifetime ran out, and of one lost underneath', async () => {
    // Long enough to outlast the create itself on a loaded machine.
    const expiring = await provider.create({ lifetimeMs: 3_000 })
    const lost = await provider.create()
    // Killed behind cordon's back, as an operator or a crashing engine would.
    execFileSync('docker', ['kill', `cordon-${lost.id}`], { stdio: 'ignore' })
    await eventually(
      () => [expiring.endReason, lost.endReason],
      (reasons) => reasons.every((reason) => reason !== undefined),
    )
    const ended = await eventually(
      () => otel.spans().filter((span) => span.name === 'cordon.sandbox'),
      (roots) =>
        [expiring.id, lost.id].every((id) =>
          roots.some((span) => span.attributes['cordon.sandbox.id'] === id),
        ),
    )
    expect(ended.length).toBeGreaterThanOrEqual(2)

    const expired = traceOf(otel, expiring)
    expect(expired.root.attributes['cordon.sandbox.end_reason']).toBe('lifetime')
    expect(expired.root.events.map((event) => event.name)).toContain('cordon.sandbox.expired')
    expect(expired.children.at(-1)?.attributes['cordon.sandbox.end_reason']).toBe('lifetime')

    const gone = traceOf(otel, lost)
    expect(gone.root.attributes['cordon.sandbox.end_reason']).toBe('lost')
    expect(
      gone.root.events.find((event) => event.name === 'cordon.sandbox.ended')?.attributes,
    ).toEqual({ 'cordon.sandbox.end_reason': 'lost' })

    expect(await sum('cordon.sandbox.ended', { 'cordon.sandbox.end_reason': 'lifetime' })).toBe(1)
    expect(await sum('cordon.sandbox.ended', { 'cordon.sandbox.end_reason': 'lost' })).toBe(1)
  })

  it('logs every egress decision, INFO when allowed and WARN when denied, inside the sandbox trace', async () => {
    const sandbox = await provider.create({
      egress: { kind: 'static', allowedHosts: ['upstream.test'] },
    })
    try {
      const allowed = await sandbox.exec(
        'wget',
        ['-q', '-O', '-', `http://upstream.test:${upstreamPort}/allowed`],
        { timeout: 15_000 },
      )
      expect(allowed.stdout).toBe('upstream saw /allowed\n')
      // Denied by policy at the gateway: no network is needed to be refused.
      const denied = await sandbox.exec('wget', ['-q', '-O', '-', 'http://example.com/'], {
        timeout: 15_000,
      })
      expect(denied.exitCode).not.toBe(0)
      const mine = () =>
        otel.logs().filter((record) => record.attributes['cordon.sandbox.id'] === sandbox.id)
      const records = await eventually(mine, (found) => found.length >= 2)
      const allow = records.find(
        (record) => record.attributes['cordon.egress.decision'] === 'allow',
      )
      const deny = records.find((record) => record.attributes['cordon.egress.decision'] === 'deny')
      expect(allow).toMatchObject({
        severityNumber: 9,
        severityText: 'INFO',
        eventName: 'cordon.egress.decision',
        attributes: expect.objectContaining({
          'server.address': 'upstream.test',
          'server.port': upstreamPort,
          'cordon.egress.reason': 'allowed',
          'cordon.egress.kind': 'http',
        }),
      })
      // The bytes are the decision event's own: for a plain HTTP exchange, the bodies.
      const allowEvent = events.find(
        (event) =>
          event.type === 'egress' && event.sandboxId === sandbox.id && event.decision === 'allow',
      )
      expect(allowEvent?.type === 'egress' && allowEvent.bytesDown).toBe(allowed.stdout.length)
      expect(allow!.attributes).toMatchObject({
        'cordon.egress.bytes_up': allowEvent?.type === 'egress' ? allowEvent.bytesUp : -1,
        'cordon.egress.bytes_down': allowed.stdout.length,
        'network.peer.address': HOST_BRIDGE_ADDRESS,
      })
      expect(deny).toMatchObject({
        severityNumber: 13,
        severityText: 'WARN',
        attributes: expect.objectContaining({
          'server.address': 'example.com',
          'server.port': 80,
          'cordon.egress.reason': 'host-not-allowed',
        }),
      })
      // Both records belong to the sandbox's trace, under its root span.
      const rootSpanIds = new Set([allow!.spanContext?.spanId, deny!.spanContext?.spanId])
      expect(rootSpanIds.size).toBe(1)
      await sandbox.destroy()
      const { root } = traceOf(otel, sandbox)
      expect(allow!.spanContext?.traceId).toBe(root.spanContext().traceId)
      expect(allow!.spanContext?.spanId).toBe(root.spanContext().spanId)

      expect(
        await sum('cordon.egress.decisions', {
          'cordon.egress.decision': 'allow',
          'cordon.egress.reason': 'allowed',
        }),
      ).toBe(1)
      expect(
        await sum('cordon.egress.decisions', {
          'cordon.egress.decision': 'deny',
          'cordon.egress.reason': 'host-not-allowed',
        }),
      ).toBe(1)
    } finally {
      await sandbox.destroy()
    }
  })

  it('under gVisor, a sandbox killed for memory ends out-of-memory and counts an OOM kill', async () => {
    const gvisor = dockerProvider(telemetry.onEvent, { runtime: 'runsc' })
    try {
      const killsBefore = await sum('cordon.sandbox.oom_kills')
      const sandbox = await gvisor.create({ memoryLimitMb: 64 })
      // Doubles a string until the sandbox runs out of memory.
      await sandbox
        .exec('sh', ['-c', 'a=x; while :; do a="$a$a"; done'], { timeout: 30_000 })
        .catch(() => undefined)
      await eventually(
        () => sandbox.endReason,
        (reason) => reason !== undefined,
      )
      expect(sandbox.endReason).toBe('out-of-memory')
      // The root span ends at destroy.end, which follows the end reason being set.
      await eventually(
        () =>
          otel
            .spans()
            .some(
              (span) =>
                span.name === 'cordon.sandbox' &&
                span.attributes['cordon.sandbox.id'] === sandbox.id,
            ),
        Boolean,
      )
      const { root, children } = traceOf(otel, sandbox)
      expect(root.attributes).toMatchObject({
        'cordon.sandbox.backend': 'container:runsc',
        'cordon.sandbox.end_reason': 'out-of-memory',
      })
      expect(children.at(-1)?.name).toBe('cordon.sandbox.destroy')
      expect(await sum('cordon.sandbox.oom_kills')).toBe(killsBefore + 1)
      expect(
        await sum('cordon.sandbox.ended', { 'cordon.sandbox.end_reason': 'out-of-memory' }),
      ).toBe(1)
    } finally {
      await gvisor.close()
    }
  })

  it('a pooled sandbox: the claim is marked on its trace, and an unclaimed one is ended by endOpenSpans', async () => {
    // Its own telemetry, so that ending open spans touches no other test's.
    const pooledOtel = inMemoryOtel()
    const pooledTelemetry = cordonTelemetry({
      tracerProvider: pooledOtel.tracerProvider,
      meterProvider: pooledOtel.meterProvider,
    })
    const pooled = dockerProvider(pooledTelemetry.onEvent, {}, [], { size: 1 })
    try {
      await pooled.warm()
      const sandbox = await pooled.create()
      await sandbox.exec('true')
      await sandbox.destroy()
      // Its warm-up ends at the claim; the claimed root holds what the caller did.
      const [warmUp, claimed] = pooledOtel
        .spans()
        .filter(
          (span) =>
            span.name === 'cordon.sandbox' && span.attributes['cordon.sandbox.id'] === sandbox.id,
        )
      expect(warmUp!.events.map((event) => event.name)).toEqual([
        'cordon.sandbox.pool.refill',
        'cordon.sandbox.pool.claim',
      ])
      expect(childrenOf(pooledOtel.spans(), warmUp).map((span) => span.name)).toEqual([
        'cordon.sandbox.create',
      ])
      expect(claimed!.events.map((event) => event.name)).toEqual(['cordon.sandbox.pool.claim'])
      expect(childrenOf(pooledOtel.spans(), claimed).map((span) => span.name)).toEqual([
        'cordon.exec',
        'cordon.sandbox.destroy',
      ])
      // The claim refills the pool in the background; wait for that sandbox to be ready.
      await eventually(
        async () => (await pooledOtel.points('cordon.sandbox.active'))[0]?.value,
        (active) => active === 1,
      )
    } finally {
      await pooled.close()
    }
    // Closing the provider removed the refilled sandbox without a destroy.end.
    expect(pooledTelemetry.trackedSandboxes).toBe(1)
    pooledTelemetry.endOpenSpans()
    expect(pooledTelemetry.trackedSandboxes).toBe(0)
    const unclaimed = pooledOtel
      .spans()
      .filter(
        (span) =>
          span.name === 'cordon.sandbox' &&
          span.attributes['cordon.telemetry.unfinished'] === 'closed',
      )
    expect(unclaimed).toHaveLength(1)
    expect((await pooledOtel.points('cordon.sandbox.active'))[0]?.value).toBe(0)
    await pooledOtel.shutdown()
  })
})

describe("a pooled sandbox's trace joins the request that claims it", () => {
  it('under an AsyncLocalStorage context manager, each claim is a child of its own request; refills of no request', async () => {
    context.setGlobalContextManager(new AsyncLocalContextManager())
    const otel = inMemoryOtel()
    const telemetry = cordonTelemetry({
      tracerProvider: otel.tracerProvider,
      meterProvider: otel.meterProvider,
    })
    const pooled = dockerProvider(telemetry.onEvent, {}, [], { size: 1 })
    const host = otel.tracerProvider.getTracer('host')
    const request = (name: string) =>
      host.startActiveSpan(name, async (span: Span) => {
        try {
          const sandbox = await pooled.create()
          await sandbox.exec('true')
          await sandbox.destroy()
          return { span, sandbox }
        } finally {
          span.end()
        }
      })
    try {
      // The pool is empty: reqA's sandbox is made for it, and a refill starts in its context.
      const a = await request('reqA')
      await pooled.warm()
      // reqB claims that refill; the claim sets off another refill in reqB's context.
      const b = await request('reqB')
      await pooled.warm()

      const rootsOf = (sandbox: CordonSandbox) =>
        otel
          .spans()
          .filter(
            (span) =>
              span.name === 'cordon.sandbox' && span.attributes['cordon.sandbox.id'] === sandbox.id,
          )
      const parentOf = (span: ReadableSpan) => span.parentSpanContext?.spanId
      const [rootA] = rootsOf(a.sandbox)
      expect(parentOf(rootA!)).toBe(a.span.spanContext().spanId)

      // reqB's sandbox: a warm-up trace of its own, ended at the claim, and
      // a root under reqB, linked to the warm-up, holding what reqB did.
      const rootsB = rootsOf(b.sandbox)
      expect(rootsB).toHaveLength(2)
      const warmUp = rootsB.find((span) => span.parentSpanContext === undefined)!
      const claimed = rootsB.find((span) => span !== warmUp)!
      expect(childrenOf(otel.spans(), warmUp).map((span) => span.name)).toEqual([
        'cordon.sandbox.create',
      ])
      expect(warmUp.events.map((event) => event.name)).toEqual([
        'cordon.sandbox.pool.refill',
        'cordon.sandbox.pool.claim',
      ])
      expect(parentOf(claimed)).toBe(b.span.spanContext().spanId)
      expect(claimed.spanContext().traceId).toBe(b.span.spanContext().traceId)
      expect(claimed.links.map((link) => link.context.spanId)).toEqual([
        warmUp.spanContext().spanId,
      ])
      expect(childrenOf(otel.spans(), claimed).map((span) => span.name)).toEqual([
        'cordon.exec',
        'cordon.sandbox.destroy',
      ])
    } finally {
      await pooled.close()
      telemetry.endOpenSpans()
      context.disable()
    }
    const unclaimed = otel
      .spans()
      .filter(
        (span) =>
          span.name === 'cordon.sandbox' &&
          span.attributes['cordon.telemetry.unfinished'] === 'closed',
      )
    // The refill reqB's claim set off belongs to no request, as none claimed it.
    expect(unclaimed).toHaveLength(1)
    expect(unclaimed[0]!.parentSpanContext).toBeUndefined()
    await otel.shutdown()
  })
})
