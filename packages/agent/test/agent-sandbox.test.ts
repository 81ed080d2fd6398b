import { createServer } from 'node:net'
import { join } from 'node:path'
import { type Duplex, PassThrough } from 'node:stream'
import {
  SandboxAbortedError,
  SandboxDestroyedError,
  type SandboxEvent,
  SandboxOperationError,
  SandboxPathError,
  SandboxReadinessError,
  SandboxTransportError,
} from '@cordon/core'
import { newSandboxId } from '@cordon/core/backend'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import {
  AgentClient,
  type AgentClientTuning,
  AgentSandbox,
  dialTcp,
  ReleasedWithError,
  waitForAgent,
  waitForAgentConnection,
} from '../src/sandbox/index.js'
import { type AgentUnderTest, delay, startAgentProcess, tcpPortOf } from './agent-harness.js'
import { UNISOLATED } from './unisolated.js'

// Tuned so failing dials give up quickly in tests.
const fast = { maxConnectAttempts: 3, retryDelayMs: 20, connectTimeoutMs: 2_000 }

async function* bytes(text: string): AsyncGenerator<Uint8Array> {
  yield new TextEncoder().encode(text)
}

function tcpClient(port: number, secret: string, tuning: AgentClientTuning = fast): AgentClient {
  return new AgentClient({
    secret,
    dial: dialTcp('127.0.0.1', port),
    description: `tcp:127.0.0.1:${port}`,
    ...tuning,
  })
}

/** A port nothing listens on (for now). */
async function freePort(): Promise<number> {
  const server = createServer()
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  const { port } = server.address() as { port: number }
  await new Promise((resolve) => server.close(resolve))
  return port
}

/** The agent started `afterMs` from now on `port`, with `secret`: what a sandbox still booting looks like. */
function startLate(port: number, secret: string, afterMs: number): Promise<AgentUnderTest> {
  return delay(afterMs).then(() =>
    startAgentProcess({ listen: `tcp:127.0.0.1:${port}`, secretVia: 'env', secret }),
  )
}

describe('AgentClient over dialTcp', () => {
  let agent: AgentUnderTest
  let port: number
  beforeAll(async () => {
    agent = await startAgentProcess({ listen: 'tcp:127.0.0.1:0', secretVia: 'env' })
    port = tcpPortOf(agent)
  })
  afterAll(async () => {
    await agent?.stop()
  })

  it('runs commands and moves files over TCP', async () => {
    const client = tcpClient(port, agent.secret)
    expect((await client.health()).type).toBe('health-ok')
    let out = ''
    const session = await client.startExec(
      { command: 'echo', args: ['through tcp'], env: {}, stdin: false },
      { onStdout: (chunk) => (out += Buffer.from(chunk).toString()) },
    )
    expect((await session.result).exitCode).toBe(0)
    expect(out).toBe('through tcp\n')
    const path = join(agent.outputs, 'hello.txt')
    expect(await client.writeFile(path, bytes('hi'), {})).toBe(2)
    const download = await client.readFile(path)
    const chunks: Uint8Array[] = []
    for await (const chunk of download.chunks) chunks.push(chunk)
    expect(Buffer.concat(chunks).toString()).toBe('hi')
    expect((await client.listFiles(agent.outputs)).map((entry) => entry.path)).toContain(path)
  })

  it('maps the agent refusing a path to SandboxPathError', async () => {
    const error = await tcpClient(port, agent.secret)
      .writeFile('/etc/cordon-nope', bytes('x'), {})
      .catch((caught: unknown) => caught)
    expect(SandboxPathError.isInstance(error)).toBe(true)
  })

  it('does not retry a wrong secret: the agent refusing the proof fails at once', async () => {
    const client = tcpClient(port, 'an-entirely-wrong-secret', { ...fast, maxConnectAttempts: 50 })
    const started = Date.now()
    const error = await client.health().catch((caught: unknown) => caught)
    expect(SandboxTransportError.isInstance(error)).toBe(true)
    expect((error as Error).message).toContain('refused')
    expect((error as SandboxTransportError).endpoint).toBe(`tcp:127.0.0.1:${port}`)
    expect(Date.now() - started).toBeLessThan(1_000)
  })

  it('honours an AbortSignal', async () => {
    const controller = new AbortController()
    controller.abort()
    const error = await tcpClient(port, agent.secret)
      .health(controller.signal)
      .catch((caught: unknown) => caught)
    expect(SandboxAbortedError.isInstance(error)).toBe(true)
  })
})

describe('AgentClient dialling', () => {
  it('gives up after a bounded number of attempts when nothing listens, naming the endpoint', async () => {
    const port = await freePort()
    const error = await tcpClient(port, 'x'.repeat(32))
      .health()
      .catch((caught: unknown) => caught)
    expect(SandboxTransportError.isInstance(error)).toBe(true)
    expect((error as Error).message).toMatch(/after 3 attempts.*ECONNREFUSED/)
    expect((error as SandboxTransportError).endpoint).toBe(`tcp:127.0.0.1:${port}`)
  })

  it('bridges an agent that starts late with its retries', async () => {
    const port = await freePort()
    const secret = `late-${'x'.repeat(24)}`
    const late = startLate(port, secret, 300)
    try {
      const client = tcpClient(port, secret, { maxConnectAttempts: 8, retryDelayMs: 50 })
      expect((await client.health()).type).toBe('health-ok')
    } finally {
      await (await late).stop()
    }
  })

  it('bounds each dial by connectTimeoutMs and lets go of a stream that arrives too late', async () => {
    const abandoned: Duplex[] = []
    const client = new AgentClient({
      secret: 'x'.repeat(32),
      description: 'test:hanging',
      connectTimeoutMs: 100,
      maxConnectAttempts: 2,
      retryDelayMs: 10,
      dial: (signal) =>
        new Promise((resolve) => {
          signal.addEventListener('abort', () => {
            const stream = new PassThrough()
            abandoned.push(stream)
            resolve(stream)
          })
        }),
    })
    const error = await client.health().catch((caught: unknown) => caught)
    expect(SandboxTransportError.isInstance(error)).toBe(true)
    expect((error as Error).message).toMatch(/after 2 attempts: dial timed out after 100 ms/)
    await delay(10)
    expect(abandoned).toHaveLength(2)
    expect(abandoned.every((stream) => stream.destroyed)).toBe(true)
  })

  it('does not retry a dial failure that is not a RetryableDialError', async () => {
    let dials = 0
    const client = new AgentClient({
      secret: 'x'.repeat(32),
      description: 'test:broken',
      ...fast,
      dial: async () => {
        dials++
        throw new Error('no such endpoint')
      },
    })
    const error = await client.health().catch((caught: unknown) => caught)
    expect(SandboxTransportError.isInstance(error)).toBe(true)
    expect((error as Error).message).toContain('no such endpoint')
    expect(dials).toBe(1)
  })
})

describe('waitForAgent', () => {
  it('polls until an agent that starts late answers, and returns its health', async () => {
    const port = await freePort()
    const secret = `late-${'y'.repeat(24)}`
    const late = startLate(port, secret, 300)
    try {
      // One dial per health check: the waiting is waitForAgent's own.
      const client = tcpClient(port, secret, { maxConnectAttempts: 1 })
      const health = await waitForAgent(client, 'sbx_late', AbortSignal.timeout(10_000))
      expect(health.writeRoots.length).toBeGreaterThan(0)
    } finally {
      await (await late).stop()
    }
  })

  it('fails at once with SandboxReadinessError when the agent refuses the secret', async () => {
    const agent = await startAgentProcess({ listen: 'tcp:127.0.0.1:0', secretVia: 'env' })
    try {
      const client = tcpClient(tcpPortOf(agent), 'an-entirely-wrong-secret')
      const error = await waitForAgent(client, 'sbx_wrong', AbortSignal.timeout(10_000)).catch(
        (caught: unknown) => caught,
      )
      expect(SandboxReadinessError.isInstance(error)).toBe(true)
      expect((error as Error).message).toContain(`sbx_wrong at ${client.description}`)
    } finally {
      await agent.stop()
    }
  })

  it('keeps trying until the signal ends the wait', async () => {
    const client = tcpClient(await freePort(), 'x'.repeat(32), { ...fast, maxConnectAttempts: 1 })
    const started = Date.now()
    const error = await waitForAgent(client, 'sbx_none', AbortSignal.timeout(300)).catch(
      (caught: unknown) => caught,
    )
    expect(Date.now() - started).toBeGreaterThanOrEqual(250)
    // The signal's reason when it fires during a health check, else the back-off's abort.
    expect((error as Error).name === 'TimeoutError' || SandboxAbortedError.isInstance(error)).toBe(
      true,
    )
  })
})

describe('waitForAgentConnection', () => {
  it('keeps the authenticated connection it waited for, and the first operation takes it without dialling', async () => {
    const port = await freePort()
    const secret = `late-${'z'.repeat(24)}`
    const late = startLate(port, secret, 300)
    try {
      let dials = 0
      const dial = dialTcp('127.0.0.1', port)
      const client = new AgentClient({
        secret,
        dial: (signal, kind) => {
          dials++
          return dial(signal, kind)
        },
        description: `tcp:127.0.0.1:${port}`,
        maxConnectAttempts: 1,
      })
      await waitForAgentConnection(client, 'sbx_late', AbortSignal.timeout(10_000))
      const dialsToReady = dials
      // The answer came on the kept connection; the next spare is dialled only after it.
      expect((await client.health()).writeRoots.length).toBeGreaterThan(0)
      expect(dials).toBe(dialsToReady)
      // From then on a spare is kept, ready for the next call.
      await delay(200)
      expect(dials).toBe(dialsToReady + 1)
      client.close()
    } finally {
      await (await late).stop()
    }
  })

  it('keeps the first spare: a second one adopted later is closed', async () => {
    const agent = await startAgentProcess({ listen: 'tcp:127.0.0.1:0', secretVia: 'env' })
    try {
      const client = tcpClient(tcpPortOf(agent), agent.secret)
      await waitForAgentConnection(client, 'sbx_two', AbortSignal.timeout(10_000))
      const second = await dialTcp('127.0.0.1', tcpPortOf(agent))(
        AbortSignal.timeout(2_000),
        'agent',
      )
      const closed = new Promise((resolve) => second.once('close', resolve))
      await client.adoptSpareConnection(second)
      await closed
      expect(second.destroyed).toBe(true)
      expect((await client.health()).writeRoots.length).toBeGreaterThan(0)
      client.close()
    } finally {
      await agent.stop()
    }
  })
})

describe('AgentSandbox', () => {
  let agent: AgentUnderTest
  const events: SandboxEvent[] = []
  let releases = 0
  let failNextRelease = false
  let sandbox: AgentSandbox
  beforeAll(async () => {
    agent = await startAgentProcess({ listen: 'tcp:127.0.0.1:0', secretVia: 'env' })
    sandbox = new AgentSandbox({
      id: newSandboxId(),
      rootDir: agent.outputs,
      env: { GREETING: 'hello', OTHER: 'sandbox' },
      workingDirectory: undefined,
      client: tcpClient(tcpPortOf(agent), agent.secret),
      backend: 'test:agent',
      ...UNISOLATED,
      emit: (event) => events.push(event),
      release: async () => {
        releases++
        if (failNextRelease) {
          failNextRelease = false
          throw new Error('release failed')
        }
      },
    })
  })
  afterAll(async () => {
    await agent?.stop()
  })

  it("runs commands in rootDir with the sandbox's env under their own, naming the backend in its events", async () => {
    const result = await sandbox.exec('sh', ['-c', 'echo "$GREETING $OTHER"; pwd'], {
      env: { OTHER: 'command' },
    })
    expect(result.exitCode).toBe(0)
    expect(result.stdout).toBe(`hello command\n${agent.outputs}\n`)
    const execEvents = events.filter((event) => event.type === 'exec')
    expect(execEvents.map((event) => [event.type, 'phase' in event && event.phase])).toEqual([
      ['exec', 'start'],
      ['exec', 'end'],
    ])
    expect(execEvents.every((event) => event.backend === 'test:agent')).toBe(true)
  })

  it('ends the exec event of a command the agent refused to start, with the error the caller got', async () => {
    events.length = 0
    const error = await sandbox
      .exec('true', [], { cwd: '/etc/passwd/x' })
      .catch((caught: unknown) => caught)
    expect(SandboxPathError.isInstance(error)).toBe(true)
    const execEvents = events.filter((event) => event.type === 'exec')
    expect(execEvents).toEqual([
      expect.objectContaining({ phase: 'start', command: 'true' }),
      expect.objectContaining({
        phase: 'end',
        command: 'true',
        outcome: 'failed',
        durationMs: expect.any(Number),
        error: expect.objectContaining({ code: 'PATH_REFUSED' }),
      }),
    ])
  })

  it('ends the exec event of a detached process as detached, not failed', async () => {
    events.length = 0
    const process = await sandbox.start('sleep', ['30'])
    await process.detach()
    const execEvents = events.filter((event) => event.type === 'exec')
    expect(execEvents).toEqual([
      expect.objectContaining({ phase: 'start', command: 'sleep' }),
      expect.objectContaining({ phase: 'end', command: 'sleep', outcome: 'detached' }),
    ])
    expect(execEvents[1]).not.toHaveProperty('error')
    const again = await sandbox.attachProcess(process.id!)
    await again.kill()
    await again.wait()
  })

  it('moves files relative to rootDir, and the agent refuses paths outside its roots', async () => {
    await sandbox.writeFile('notes/a.txt', 'data')
    expect(
      new TextDecoder().decode(await sandbox.readFile(join(agent.outputs, 'notes/a.txt'))),
    ).toBe('data')
    expect((await sandbox.listFiles()).map((entry) => entry.path)).toContain(
      join(agent.outputs, 'notes/a.txt'),
    )
    const error = await sandbox
      .writeFile('/etc/cordon-nope', 'x')
      .catch((caught: unknown) => caught)
    expect(SandboxPathError.isInstance(error)).toBe(true)
    // The path once, then why.
    expect((error as Error).message).toBe(
      `Path "/etc/cordon-nope" refused: it is outside the write roots (${agent.outputs})`,
    )
    expect(error).toMatchObject({
      path: '/etc/cordon-nope',
      reason: `it is outside the write roots (${agent.outputs})`,
    })
  })

  it('a release that removed everything but fails the destroy (ReleasedWithError) leaves the sandbox destroyed, not ready', async () => {
    let warned = 0
    const warning = new SandboxOperationError('destroy', 'the seal was cut short')
    const gone = new AgentSandbox({
      id: newSandboxId(),
      rootDir: agent.outputs,
      env: {},
      workingDirectory: undefined,
      client: tcpClient(tcpPortOf(agent), agent.secret),
      backend: 'test:agent',
      ...UNISOLATED,
      emit: () => {},
      release: async () => {
        warned++
        throw new ReleasedWithError(warning)
      },
    })
    expect((await gone.exec('true')).exitCode).toBe(0)
    await expect(gone.destroy()).rejects.toBe(warning)
    expect(gone.status).toBe('destroyed')
    const refused = await gone.exec('true').catch((caught: unknown) => caught)
    expect(SandboxDestroyedError.isInstance(refused)).toBe(true)
    // Nothing is left to release again.
    await gone.destroy()
    expect(warned).toBe(1)
  })

  it('destroy abandons running commands and releases; a failed release is tried again', async () => {
    failNextRelease = true
    await expect(sandbox.destroy()).rejects.toThrow('release failed')
    expect(sandbox.status).toBe('ready')
    const running = await sandbox.start('sleep', ['30'])
    await sandbox.destroy()
    await sandbox.destroy()
    expect(releases).toBe(2)
    expect(sandbox.status).toBe('destroyed')
    const waited = await running.wait().catch((caught: unknown) => caught)
    expect(SandboxDestroyedError.isInstance(waited)).toBe(true)
    const refused = await sandbox.exec('true').catch((caught: unknown) => caught)
    expect(SandboxDestroyedError.isInstance(refused)).toBe(true)
  })
})
