import { describe, expect, it } from 'vitest'
import { composeProvider, prepareProviderConfig, sleep } from '../src/backend-kit.js'
import {
  type CordonBackendSandbox,
  SandboxControlRefusedError,
  SandboxDestroyedError,
  type SandboxEndReason,
  type SandboxEvent,
} from '../src/index.js'
import { RECORDING, RecordingBackend, type RecordingProviderConfig } from './memory-backend.js'

function makeProvider(
  extra: Partial<RecordingProviderConfig> = {},
  decorate: (sandbox: CordonBackendSandbox) => CordonBackendSandbox = (sandbox) => sandbox,
) {
  const backend = new RecordingBackend()
  const create = backend.create.bind(backend)
  backend.create = async (options) => decorate(await create(options))
  const events: SandboxEvent[] = []
  const prepared = prepareProviderConfig(
    {
      backend: { tier: 'test' },
      layout: { outputs: { source: { type: 'ephemeral' } } },
      onEvent: (event) => events.push(event),
      ...extra,
    } as RecordingProviderConfig,
    [RECORDING],
  )
  const provider = composeProvider({
    ...prepared,
    loadBackend: async () => backend,
  })
  return { provider, backend, events }
}

const endOf = (events: SandboxEvent[]) =>
  events.find((event) => event.type === 'lifecycle' && event.phase === 'destroy.end') as
    | { endReason?: SandboxEndReason }
    | undefined

describe('why a sandbox ended', () => {
  it('records destroyed, lifetime and provider-closed, on the sandbox and the last event', async () => {
    const destroyed = makeProvider()
    const a = await destroyed.provider.create()
    expect(a.endReason).toBeUndefined()
    await a.destroy()
    expect(a.endReason).toBe('destroyed')
    expect(endOf(destroyed.events)?.endReason).toBe('destroyed')

    const expiring = makeProvider()
    const b = await expiring.provider.create({ lifetimeMs: 20 })
    await sleep(100)
    expect(b.endReason).toBe('lifetime')
    expect(endOf(expiring.events)?.endReason).toBe('lifetime')

    const closing = makeProvider()
    const c = await closing.provider.create()
    await closing.provider.close()
    expect(c.endReason).toBe('provider-closed')
  })

  it('takes the reason a backend reports when a sandbox ends underneath its host', async () => {
    let endNow: (reason: SandboxEndReason) => void = () => {}
    const { provider, backend, events } = makeProvider({}, (sandbox) =>
      Object.assign(sandbox, {
        whenEnded: () => new Promise<SandboxEndReason>((resolve) => (endNow = resolve)),
      }),
    )
    const sandbox = await provider.create()
    endNow('out-of-memory')
    await sleep(10)
    expect(sandbox.endReason).toBe('out-of-memory')
    expect(backend.destroyed).toEqual([sandbox.id])
    expect(
      events.some(
        (event) =>
          event.type === 'lifecycle' &&
          event.phase === 'ended' &&
          event.endReason === 'out-of-memory',
      ),
    ).toBe(true)
  })
})

describe('why a sandbox ended, read at once', () => {
  it('is known from the moment its status reads destroyed, for each way it is ended', async () => {
    const destroyed = makeProvider()
    const a = await destroyed.provider.create()
    const ending = a.destroy()
    expect(a.status).toBe('destroyed')
    expect(a.endReason).toBe('destroyed')
    await ending

    const closing = makeProvider()
    const c = await closing.provider.create()
    const closed = closing.provider.close()
    // Read at every turn of the event loop until it is torn down: never destroyed without a reason.
    for (let turn = 0; c.status !== 'destroyed' && turn < 1000; turn++) await Promise.resolve()
    expect(c.status).toBe('destroyed')
    expect(c.endReason).toBe('provider-closed')
    await closed
  })

  it('a call that fails because the sandbox was lost fails once endReason says so', async () => {
    let endNow: (reason: SandboxEndReason) => void = () => {}
    const { provider } = makeProvider({}, (sandbox) =>
      Object.assign(sandbox, {
        whenEnded: () => new Promise<SandboxEndReason>((resolve) => (endNow = resolve)),
        // The connection drops first; the engine's notice of the end comes 50 ms later.
        exec: async () => {
          setTimeout(() => endNow('lost'), 50)
          throw new SandboxDestroyedError(sandbox.id)
        },
      }),
    )
    const sandbox = await provider.create()
    const failure = await sandbox.exec('true').catch((error: unknown) => error)
    expect(SandboxDestroyedError.isInstance(failure)).toBe(true)
    expect(sandbox.endReason).toBe('lost')
  })
})

describe('idle timeout', () => {
  it('reaps an idle sandbox on time, and never one that is running something', async () => {
    const { provider, backend, events } = makeProvider({ defaultIdleTimeoutMs: 60 })
    backend.execDelayMs = 250
    const busy = await provider.create()
    const idle = await provider.create()
    const running = busy.exec('sleep')
    await sleep(150)
    expect(idle.endReason).toBe('idle')
    expect(events.some((event) => event.type === 'lifecycle' && event.phase === 'idle')).toBe(true)
    // A silent command four times longer than the idle timeout keeps its sandbox.
    expect(busy.endReason).toBeUndefined()
    await running
    expect(busy.endReason).toBeUndefined()
    await sleep(150)
    expect(busy.endReason).toBe('idle')
  })

  it('keepAlive restarts the idle clock and can lease a stretch of busy time', async () => {
    const { provider } = makeProvider()
    const sandbox = await provider.create({ idleTimeoutMs: 60 })
    for (let i = 0; i < 4; i++) {
      await sleep(30)
      sandbox.keepAlive()
    }
    expect(sandbox.endReason).toBeUndefined()
    sandbox.keepAlive(200)
    await sleep(150)
    expect(sandbox.endReason).toBeUndefined()
    await sleep(200)
    expect(sandbox.endReason).toBe('idle')
    expect(() => sandbox.keepAlive(-1)).toThrow('non-negative')
  })

  it('counts a process the host detached from as work until the backend lists it as ended', async () => {
    let running = true
    let settle: (error: Error) => void = () => {}
    const { provider } = makeProvider({}, (sandbox) =>
      Object.assign(sandbox, {
        start: async () => {
          const waited = new Promise<never>((_resolve, reject) => {
            settle = reject
          })
          waited.catch(() => {})
          return {
            id: 'proc_1',
            pid: 7,
            droppedOutputBytes: 0,
            write: async () => {},
            closeStdin: async () => {},
            kill: async () => {},
            wait: () => waited,
            detach: async () => settle(new Error('detached')),
            [Symbol.asyncDispose]: async () => {},
          }
        },
        listProcesses: async () => [
          {
            id: 'proc_1',
            pid: 7,
            command: 'server',
            args: [],
            status: running ? ('running' as const) : ('exited' as const),
            startedAt: Date.now(),
            attached: false,
          },
        ],
      }),
    )
    const sandbox = await provider.create({ idleTimeoutMs: 60 })
    const server = await sandbox.start('server')
    await server.detach()
    await sleep(250)
    expect(sandbox.endReason).toBeUndefined()
    running = false
    await sleep(250)
    expect(sandbox.endReason).toBe('idle')
  })

  it('validates idleTimeoutMs like every other duration', async () => {
    const { provider } = makeProvider()
    await expect(provider.create({ idleTimeoutMs: 0 })).rejects.toThrow('idleTimeoutMs')
  })
})

describe('usage and events the provider adds', () => {
  it("counts a sandbox's egress from the gateway's events and reports file operations", async () => {
    let emitEvent: (event: SandboxEvent) => void = () => {}
    const backend = new RecordingBackend()
    const events: SandboxEvent[] = []
    const prepared = prepareProviderConfig(
      {
        backend: { tier: 'test' },
        layout: { outputs: { source: { type: 'ephemeral' } } },
        onEvent: (event) => events.push(event),
      } as RecordingProviderConfig,
      [RECORDING],
    )
    const provider = composeProvider({
      ...prepared,
      loadBackend: async (context) => {
        emitEvent = context.emit
        return backend
      },
    })
    const sandbox = await provider.create()
    for (const [up, down] of [
      [100, 2000],
      [50, 10],
    ] as const)
      emitEvent({
        type: 'egress',
        sandboxId: sandbox.id,
        timestamp: Date.now(),
        kind: 'connect',
        host: 'example.com',
        port: 443,
        decision: 'allow',
        reason: 'allowed',
        bytesUp: up,
        bytesDown: down,
        durationMs: 5,
      })
    const usage = await sandbox.stats()
    expect(usage).toMatchObject({ egressBytesOut: 150, egressBytesIn: 2010 })
    // What the backend measured and declares, and nothing it does not declare.
    expect(usage.cpuTimeMs).toBe(7)
    expect(usage.memoryBytes).toBeUndefined()
    await sandbox.writeFile('a.txt', 'héllo')
    expect(events.at(-1)).toMatchObject({
      type: 'file',
      operation: 'write',
      path: 'a.txt',
      bytes: 6,
      sandboxId: sandbox.id,
    })
    await sandbox.listFiles()
    expect(events.at(-1)).toMatchObject({ type: 'file', operation: 'list', files: 0 })
  })

  it('refuses a terminal where the backend has none, naming the control', async () => {
    const { provider } = makeProvider()
    const sandbox = await provider.create()
    const error = await sandbox
      .openTerminal({ size: { cols: 80, rows: 24 } })
      .catch((caught: unknown) => caught)
    expect(SandboxControlRefusedError.isInstance(error)).toBe(true)
    expect((error as SandboxControlRefusedError).message).toContain('openTerminal')
  })
})
