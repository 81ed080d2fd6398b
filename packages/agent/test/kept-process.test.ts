import { once } from 'node:events'
import { existsSync } from 'node:fs'
import { createServer, type Server, type Socket } from 'node:net'
import {
  SandboxControlRefusedError,
  type SandboxExecResult,
  SandboxOperationError,
} from '@cordon/core'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import {
  computeAgentProof,
  FramedConnection,
  PROTOCOL_VERSION,
  parseClientMessage,
  verifyAuthProof,
} from '../src/protocol/index.js'
import { AgentClient, type AgentSandbox, dialTcp, keepHostHold } from '../src/sandbox/index.js'
import {
  type AgentUnderTest,
  delay,
  processesMatching,
  startAgentProcess,
  tcpPortOf,
} from './agent-harness.js'
import { tcpAgentSandbox } from './tcp-agent-sandbox.js'

/** Processes started with `start`: listed, detached from and attached to again, through the real bundled agent. */

function sandboxOn(port: number, secret: string): AgentSandbox {
  return tcpAgentSandbox({ port, secret, tuning: { maxConnectAttempts: 2, retryDelayMs: 20 } })
}

async function until(check: () => Promise<boolean>, timeoutMs = 5_000): Promise<void> {
  const deadline = Date.now() + timeoutMs
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error('condition not met in time')
    await delay(25)
  }
}

describe('kept processes through the agent', () => {
  let agent: AgentUnderTest
  let sandbox: AgentSandbox
  beforeAll(async () => {
    agent = await startAgentProcess({ listen: 'tcp:127.0.0.1:0', secretVia: 'env' })
    sandbox = tcpAgentSandbox({
      port: tcpPortOf(agent),
      secret: agent.secret,
      init: { rootDir: agent.outputs },
    })
  })
  afterAll(async () => {
    await sandbox?.destroy()
    await agent?.stop()
  })

  it('lists a started process while it runs and after it ends, with its exit code', async () => {
    const started = Date.now()
    const process = await sandbox.start('sh', ['-c', 'read line; exit 7'])
    expect(process.id).toMatch(/^proc_[0-9a-f]{20}$/)
    expect(process.pid).toBeGreaterThan(0)
    const running = (await sandbox.listProcesses()).find((entry) => entry.id === process.id)
    expect(running).toMatchObject({
      pid: process.pid,
      command: 'sh',
      args: ['-c', 'read line; exit 7'],
      status: 'running',
      attached: true,
    })
    expect(running!.startedAt).toBeGreaterThanOrEqual(started - 1_000)
    await process.write('go\n')
    expect((await process.wait()).exitCode).toBe(7)
    const ended = (await sandbox.listProcesses()).find((entry) => entry.id === process.id)
    expect(ended).toMatchObject({ status: 'exited', exitCode: 7, attached: false })
    expect(ended!.endedAt).toBeGreaterThanOrEqual(ended!.startedAt)
    // exec's commands are not listed: they live and die with their call.
    await sandbox.exec('true')
    expect((await sandbox.listProcesses()).every((entry) => entry.command !== 'true')).toBe(true)
  })

  it('replays the output written while detached, then follows it live to its exit', async () => {
    let first = ''
    const process = await sandbox.start(
      'sh',
      [
        '-c',
        'echo first; while [ ! -e gate-replay ]; do sleep 0.05; done; echo while-detached; echo err >&2; read go2; echo live; exit 3',
      ],
      { onOutput: (chunk) => (first += chunk.data) },
    )
    let seen = ''
    await until(async () => first === 'first\n')
    await process.detach()
    // What follows is written only now, while nobody is attached.
    await sandbox.writeFile('gate-replay', '')
    const detached = await process.wait().catch((error: unknown) => error)
    expect(SandboxOperationError.isInstance(detached)).toBe(true)
    expect((detached as Error).message).toContain(`attachProcess('${process.id}')`)
    expect(SandboxOperationError.isInstance(await process.kill().catch((e: unknown) => e))).toBe(
      true,
    )
    const listed = (await sandbox.listProcesses()).find((entry) => entry.id === process.id)
    expect(listed).toMatchObject({ status: 'running', attached: false })

    const again = await sandbox.attachProcess(process.id!, {
      onOutput: (chunk) => {
        seen += chunk.data
      },
    })
    expect(again.id).toBe(process.id)
    expect(again.droppedOutputBytes).toBe(0)
    await again.write('2\n')
    const result = await again.wait()
    expect(result.exitCode).toBe(3)
    // What the first handle received is not repeated; what it missed is.
    expect(result.stdout).toBe('while-detached\nlive\n')
    expect(result.stderr).toBe('err\n')
    expect(seen).toContain('while-detached')
  })

  it('keeps a running process when the connection that started it goes', async () => {
    const process = await sandbox.start('sh', [
      '-c',
      'while [ ! -e gate-kept ]; do sleep 0.05; done; echo kept-alive-marker; : > kept-written; exec sleep 30',
    ])
    ;(process as unknown as { abandon(): void }).abandon()
    await process.wait().catch(() => {})
    expect(existsSync(`/proc/${process.pid}`)).toBe(true)
    // Its output comes while nobody is attached.
    await sandbox.writeFile('gate-kept', '')
    await until(async () => (await sandbox.exec('test', ['-e', 'kept-written'])).exitCode === 0)
    const again = await sandbox.attachProcess(process.id!)
    await again.kill('SIGKILL')
    const result = await again.wait()
    expect(result.signal).toBe('SIGKILL')
    expect(result.stdout).toBe('kept-alive-marker\n')
    await until(async () => !existsSync(`/proc/${process.pid}`))
  })

  it('drops the oldest output past the bound while detached, and says how much', async () => {
    // 3000 KiB of numbered lines while nobody listens; the agent keeps the last 1 MiB.
    const process = await sandbox.start('sh', [
      '-c',
      'while [ ! -e go ]; do sleep 0.05; done; i=0; while [ $i -lt 3000 ]; do printf "%01023d\\n" $i; i=$((i+1)); done; echo tail-end',
    ])
    await process.detach()
    await sandbox.writeFile('go', '')
    await until(async () =>
      (await sandbox.listProcesses()).some((p) => p.id === process.id && p.status === 'exited'),
    )
    const again = await sandbox.attachProcess(process.id!)
    const result = await again.wait()
    expect(Buffer.byteLength(result.stdout)).toBe(1024 * 1024)
    expect(again.droppedOutputBytes).toBe(3000 * 1024 + 9 - 1024 * 1024)
    expect(result.stdout.endsWith('02999\ntail-end\n')).toBe(true)
    expect(result.exitCode).toBe(0)
  })

  it('moves a process to a later attach: the earlier handle is detached', async () => {
    const first = await sandbox.start('sh', ['-c', 'read x; echo "got $x"'])
    const second = await sandbox.attachProcess(first.id!)
    const earlier = await first.wait().catch((error: unknown) => error)
    expect(SandboxOperationError.isInstance(earlier)).toBe(true)
    expect((earlier as Error).message).toContain('another connection attached')
    await second.write('hello\n')
    expect((await second.wait()).stdout).toBe('got hello\n')
  })

  it('reattaches from a fresh client, as another host process would', async () => {
    const process = await sandbox.start('sh', [
      '-c',
      'while [ ! -e gate-away ]; do sleep 0.05; done; echo while-away; read x; echo "$x"',
    ])
    await process.detach()
    await sandbox.writeFile('gate-away', '')
    const other = sandboxOn(tcpPortOf(agent), agent.secret)
    try {
      const listed = await other.listProcesses()
      expect(listed.some((entry) => entry.id === process.id)).toBe(true)
      const attached = await other.attachProcess(process.id!)
      await attached.write('from-the-second\n')
      const result: SandboxExecResult = await attached.wait()
      expect(result.stdout).toBe('while-away\nfrom-the-second\n')
    } finally {
      await other.destroy()
    }
  })

  it('refuses an unknown process id', async () => {
    const error = await sandbox.attachProcess('proc_00000000000000000000').catch((e: unknown) => e)
    expect(SandboxOperationError.isInstance(error)).toBe(true)
    expect((error as Error).message).toContain('no process')
  })

  it('ends kept processes when the agent ends', async () => {
    const own = await startAgentProcess({ listen: 'tcp:127.0.0.1:0', secretVia: 'env' })
    const other = sandboxOn(tcpPortOf(own), own.secret)
    const process = await other.start('sh', ['-c', 'echo agent-end-marker; sleep 60'])
    await process.detach()
    expect(await processesMatching('agent-end-marker')).not.toEqual([])
    await own.stop()
    await until(async () => (await processesMatching('agent-end-marker')).length === 0)
  })
})

describe('an agent of an earlier revision', () => {
  const secret = 'revision-zero-secret-0123456789'
  const requests: unknown[] = []
  let server: Server
  let port: number
  beforeAll(async () => {
    // Protocol 2 without a revision: what agents before the file API and kept processes announce.
    server = createServer(async (socket: Socket) => {
      const connection = new FramedConnection(socket)
      const nonce = 'cd'.repeat(32)
      try {
        await connection.send({
          type: 'hello',
          protocol: PROTOCOL_VERSION,
          nonce,
          agentVersion: 'old',
        })
        const frame = await connection.read()
        if (frame?.kind !== 'message') return
        const auth = parseClientMessage(frame.message)
        if (auth.type !== 'auth' || !verifyAuthProof(secret, nonce, auth.proof)) return
        await connection.send({
          type: 'auth-ok',
          proof: computeAgentProof(secret, auth.nonce, nonce),
        })
        const request = await connection.read()
        if (request?.kind !== 'message') return
        requests.push(request.message)
        if (request.message.type === 'exec') {
          await connection.send({ type: 'started', pid: 42 })
          await connection.send({
            type: 'exit',
            exitCode: 0,
            signal: null,
            timedOut: false,
            aborted: false,
            oomKilled: false,
            durationMs: 1,
          })
          connection.close()
        }
      } catch {
        // The client hung up.
      }
    })
    server.listen(0, '127.0.0.1')
    await once(server, 'listening')
    port = (server.address() as { port: number }).port
  })
  afterAll(() => {
    server?.close()
  })

  it('refuses the new requests with SandboxControlRefusedError, sending none of them', async () => {
    const sandbox = sandboxOn(port, secret)
    const calls: Array<Promise<unknown>> = [
      sandbox.statFile('/tmp/x'),
      sandbox.removeFile('/tmp/x'),
      sandbox.renameFile('/tmp/x', '/tmp/y'),
      sandbox.makeDirectory('/tmp/x'),
      sandbox.watchDirectory('/tmp'),
      sandbox.listProcesses(),
      sandbox.attachProcess('proc_0123'),
    ]
    for (const call of calls) {
      const error = await call.catch((e: unknown) => e)
      expect(SandboxControlRefusedError.isInstance(error)).toBe(true)
      expect((error as Error).message).toContain('revision 0')
    }
    expect(requests).toEqual([])
  })

  it('refuses a host hold with SandboxControlRefusedError naming hold-host, sending nothing', async () => {
    const client = new AgentClient({
      secret,
      dial: dialTcp('127.0.0.1', port),
      description: `tcp:127.0.0.1:${port}`,
      maxConnectAttempts: 2,
      retryDelayMs: 20,
    })
    const before = requests.length
    const error = await keepHostHold(client, 1_000).catch((e: unknown) => e)
    expect(SandboxControlRefusedError.isInstance(error)).toBe(true)
    expect((error as SandboxControlRefusedError).control).toBe('hold-host')
    expect((error as Error).message).toContain('revision 0')
    expect(requests.length).toBe(before)
  })

  it('still starts a process there, as a plain exec without an id', async () => {
    const sandbox = sandboxOn(port, secret)
    const process = await sandbox.start('true')
    expect(process.id).toBeUndefined()
    expect((await process.wait()).exitCode).toBe(0)
    expect(requests).toEqual([expect.not.objectContaining({ keep: true })])
    expect(requests[0]).toMatchObject({ type: 'exec', command: 'true' })
  })
})
