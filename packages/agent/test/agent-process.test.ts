import { spawn } from 'node:child_process'
import { existsSync } from 'node:fs'
import { chmod, mkdir, mkdtemp, readFile, rm, symlink, writeFile } from 'node:fs/promises'
import { createServer } from 'node:net'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import {
  AgentRemoteError,
  computeAuthProof,
  encodeDataFrame,
  type Frame,
  FramedConnection,
  PRE_AUTH_MAX_FRAME_BYTES,
  parseAgentMessage,
  requestExec,
  requestHealth,
  requestListFiles,
  requestReadFile,
  requestWriteFile,
} from '../src/protocol/index.js'
import {
  AGENT_PROGRAM,
  type AgentUnderTest,
  delay,
  LAUNCHER_PROGRAM,
  LAUNCHERS,
  processesMatching,
  processesOnce,
  runCommand,
  startAgentProcess,
  tcpPortOf,
} from './agent-harness.js'

const run = runCommand

/** The nonce of a `hello` frame (failing the test if it is not one). */
function nonceOf(frame: Frame | undefined): string {
  if (frame?.kind !== 'message' || frame.message.type !== 'hello')
    throw new Error(`expected hello, got ${JSON.stringify(frame)}`)
  return String(frame.message.nonce)
}

async function* bytesOf(...chunks: Uint8Array[]): AsyncGenerator<Uint8Array> {
  yield* chunks
}

async function collect(chunks: AsyncIterable<Uint8Array>): Promise<Buffer> {
  const parts: Uint8Array[] = []
  for await (const chunk of chunks) parts.push(chunk)
  return Buffer.concat(parts)
}

describe.each(LAUNCHERS)('agent program (bundled, real child process), %s', (_, launchMode) => {
  let agent: AgentUnderTest
  beforeAll(async () => {
    agent = await startAgentProcess({
      env: { CORDON_AGENT_RESEED_HOOK: '', ...launchMode.env },
      startedByLauncher: launchMode.startedByLauncher,
    })
  })
  afterAll(async () => {
    await agent?.stop()
  })

  describe('authentication', () => {
    it('removes the secret file once read', () => {
      expect(existsSync(join(agent.dir, 'secret'))).toBe(false)
    })

    it('sends only a hello before the client proves the secret, and refuses a wrong proof', async () => {
      const connection = await agent.connectRaw()
      const nonce = nonceOf(await connection.read())
      await connection.send({
        type: 'auth',
        proof: computeAuthProof('not-the-secret-at-all', nonce),
        nonce: 'cd'.repeat(32),
      })
      const reply = await connection.read()
      expect(reply?.kind === 'message' && parseAgentMessage(reply.message)).toMatchObject({
        type: 'error',
        code: 'unauthorized',
      })
      expect(await connection.read()).toBeUndefined()
    })

    it('refuses a request sent in place of the proof', async () => {
      const connection = await agent.connectRaw()
      await connection.read()
      await connection.send({ type: 'health' })
      const reply = await connection.read()
      expect(reply?.kind === 'message' && reply.message).toMatchObject({
        type: 'error',
        code: 'unauthorized',
      })
    })

    it('drops a client that sends an oversized frame before authenticating', async () => {
      const connection = await agent.connectRaw()
      await connection.read()
      connection.socket.write(
        encodeDataFrame('stdin', new Uint8Array(PRE_AUTH_MAX_FRAME_BYTES + 10)),
      )
      await expect(connection.read()).resolves.toBeUndefined()
    })

    it('a recorded proof does not open a second connection (fresh nonce each time)', async () => {
      const first = await agent.connectRaw()
      const nonce = nonceOf(await first.read())
      const proof = computeAuthProof(agent.secret, nonce)
      first.destroy()
      const second = await agent.connectRaw()
      expect(nonceOf(await second.read())).not.toBe(nonce)
      await second.send({ type: 'auth', proof, nonce: 'cd'.repeat(32) })
      const reply = await second.read()
      expect(reply?.kind === 'message' && reply.message).toMatchObject({
        type: 'error',
        code: 'unauthorized',
      })
    })

    it('answers health once authenticated', async () => {
      const health = await requestHealth(await agent.connect())
      expect(health).toMatchObject({ type: 'health-ok', resumes: 0, writeRoots: [agent.outputs] })
    })
  })

  describe('exec', () => {
    it('gives commands only the environment the request carries, never the agent configuration', async () => {
      const { exit, stdout } = await run(agent, 'env', [], { env: { ONLY: 'this' } })
      expect(exit.exitCode).toBe(0)
      const names = stdout
        .trim()
        .split('\n')
        .map((line) => line.split('=')[0])
        .sort()
      expect(names).toEqual(['CORDON_EXEC_ID', 'CORDON_RUN_ID', 'ONLY', 'PATH'])
      expect(stdout).not.toContain(agent.secret)
    })

    it('reports exit codes, signals and a missing command like a shell does', async () => {
      expect((await run(agent, 'sh', ['-c', 'exit 7'])).exit).toMatchObject({
        exitCode: 7,
        signal: null,
      })
      expect((await run(agent, 'sh', ['-c', 'kill -TERM $$'])).exit).toMatchObject({
        exitCode: 143,
        signal: 'SIGTERM',
      })
      const missing = await run(agent, '/no/such/thing', [])
      expect(missing.exit.exitCode).toBe(127)
      expect(missing.stderr).toContain('not found')
    })

    it('makes a missing working directory inside the write roots before the command, and refuses one elsewhere', async () => {
      const inside = join(agent.outputs, 'not/yet/there')
      expect((await run(agent, 'pwd', [], { cwd: inside })).stdout).toBe(`${inside}\n`)
      await expect(run(agent, 'pwd', [], { cwd: '/no/such/dir' })).rejects.toMatchObject({
        code: 'path-refused',
      })
      expect(existsSync('/no/such/dir')).toBe(false)
      await writeFile(join(agent.outputs, 'plain-file'), 'x')
      await expect(
        run(agent, 'pwd', [], { cwd: join(agent.outputs, 'plain-file') }),
      ).rejects.toMatchObject({ code: 'bad-cwd' })
    })

    it('feeds stdin with acknowledgements and closes it', async () => {
      const { stdout } = await run(agent, 'sh', ['-c', 'wc -c; echo done'], {
        stdin: 'x'.repeat(200_000),
      })
      expect(stdout).toBe('200000\ndone\n')
    })

    it('keeps a silent command alive with heartbeats, and ends it when the client goes silent', async () => {
      const quiet = await agent.connect({ heartbeatMs: 100 })
      const session = await requestExec(quiet, {
        command: 'sh',
        args: ['-c', 'sleep 1; echo awake'],
        env: {},
        stdin: false,
      })
      const chunks: string[] = []
      await expect(session.result).resolves.toMatchObject({ exitCode: 0 })

      const marker = `cordon-silent-${Date.now()}`
      const silent = await agent.connect({ heartbeatMs: 100 })
      await requestExec(
        silent,
        { command: 'sh', args: ['-c', `sleep 30; echo ${marker}`], env: {}, stdin: false },
        {
          onStdout: (bytes) => chunks.push(Buffer.from(bytes).toString()),
        },
      )
      expect(await processesOnce(marker, (pids) => pids.length > 0)).not.toEqual([])
      // The client stops heartbeating and stops reading: to the agent it is gone.
      silent.stopHeartbeat()
      silent.socket.pause()
      expect(await processesOnce(marker, (pids) => pids.length === 0)).toEqual([])
      silent.destroy()
    })

    it('cancel kills the whole tree, setsid grandchildren included, and marks the result aborted', async () => {
      const marker = `cordon-cancel-${Date.now()}`
      const connection = await agent.connect()
      const session = await requestExec(connection, {
        command: 'sh',
        args: [
          '-c',
          `(setsid sh -c 'sleep 400; echo ${marker}' &); sh -c 'sleep 401; echo ${marker}' & wait`,
        ],
        env: {},
        stdin: false,
      })
      expect(
        (await processesOnce(marker, (pids) => pids.length >= 2)).length,
      ).toBeGreaterThanOrEqual(2)
      await session.cancel('SIGKILL', 'abort')
      const exit = await session.result
      expect(exit).toMatchObject({
        aborted: true,
        timedOut: false,
        signal: 'SIGKILL',
        exitCode: 137,
      })
      expect(await processesMatching(marker)).toEqual([])
    })

    it('a SIGTERM kill escalates to SIGKILL for a tree that ignores it', async () => {
      let armedOutput = ''
      const connection = await agent.connect()
      const session = await requestExec(
        connection,
        {
          command: 'sh',
          args: ['-c', 'trap "" TERM; echo armed; sleep 30; sleep 31'],
          env: {},
          stdin: false,
        },
        {
          onStdout: (bytes) => {
            armedOutput += Buffer.from(bytes).toString()
          },
        },
      )
      // The shell ignores SIGTERM only once it has run `trap`.
      for (let i = 0; i < 200 && !armedOutput.includes('armed'); i++) await delay(50)
      expect(armedOutput).toContain('armed')
      const started = Date.now()
      await session.cancel('SIGTERM', 'kill')
      const exit = await session.result
      expect(exit).toMatchObject({ signal: 'SIGKILL', aborted: false, timedOut: false })
      expect(Date.now() - started).toBeGreaterThanOrEqual(1_500)
    })

    it('a timeout kills the tree and says so', async () => {
      const marker = `cordon-timeout-${Date.now()}`
      const { exit } = await run(
        agent,
        'sh',
        ['-c', `(setsid sh -c 'sleep 500; echo ${marker}' &); sleep 501; echo ${marker}`],
        {
          timeoutMs: 500,
        },
      )
      expect(exit).toMatchObject({ timedOut: true, aborted: false, signal: 'SIGKILL' })
      expect(await processesMatching(marker)).toEqual([])
    })

    it('a timeout ends an exec whose first process exited while a background one holds its output', async () => {
      const marker = `cordon-held-${Date.now()}`
      const began = Date.now()
      const { exit, stdout } = await run(
        agent,
        'sh',
        ['-c', `sh -c 'sleep 501; echo ${marker}' & echo started`],
        { timeoutMs: 500 },
      )
      // Not the background sleep's 501 s: the timeout killed what held the output.
      expect(Date.now() - began).toBeLessThan(30_000)
      expect(stdout).toBe('started\n')
      expect(exit).toMatchObject({ timedOut: true, aborted: false, exitCode: 0 })
      expect(await processesMatching(marker)).toEqual([])
    })

    it('dropping the connection kills what holds the output after the first process exited', async () => {
      const marker = `cordon-held-drop-${Date.now()}`
      const connection = await agent.connect()
      await requestExec(connection, {
        command: 'sh',
        args: ['-c', `sh -c 'sleep 601; echo ${marker}' & echo started`],
        env: {},
        stdin: false,
      })
      expect(await processesOnce(marker, (pids) => pids.length > 0)).not.toEqual([])
      // The first `sh` has exited by now (it only started the background one).
      await delay(300)
      connection.destroy()
      expect(await processesOnce(marker, (pids) => pids.length === 0)).toEqual([])
    })

    it('dropping the connection kills the command', async () => {
      const marker = `cordon-drop-${Date.now()}`
      const connection = await agent.connect()
      await requestExec(connection, {
        command: 'sh',
        args: ['-c', `sleep 600; echo ${marker}`],
        env: {},
        stdin: false,
      })
      // `started` can come before the launcher's child has exec'd `sh` on a loaded machine.
      expect(await processesOnce(marker, (pids) => pids.length > 0)).not.toEqual([])
      connection.destroy()
      expect(await processesOnce(marker, (pids) => pids.length === 0)).toEqual([])
    })
  })

  describe('files', () => {
    it('round-trips bytes through streamed frames and applies the mode', async () => {
      const bytes = Buffer.alloc(300_000).map((_, i) => (i * 7) % 256)
      const path = join(agent.outputs, 'deep/dir/file.bin')
      expect(
        await requestWriteFile(
          await agent.connect(),
          path,
          bytesOf(bytes.subarray(0, 1000), bytes.subarray(1000)),
          { mode: 0o640 },
        ),
      ).toBe(bytes.byteLength)
      const download = await requestReadFile(await agent.connect(), path)
      expect(download.size).toBe(bytes.byteLength)
      expect(download.mode).toBe(0o640)
      expect((await collect(download.chunks)).equals(bytes)).toBe(true)
    })

    it("a streamed upload's 64 KiB pieces leave in gathered writes of up to 1 MiB", async () => {
      const piece = 64 * 1024
      const bytes = Buffer.alloc(40 * piece).map((_, i) => (i * 13) % 256)
      const pieces = Array.from({ length: 40 }, (_, i) =>
        bytes.subarray(i * piece, (i + 1) * piece),
      )
      const connection = await agent.connect()
      // Each write the socket hands the system: one a piece (and its frame
      // header) if they were sent one by one, one a gathered megabyte here.
      const socket = connection.socket as unknown as {
        _write: (...args: unknown[]) => void
        _writev: (...args: unknown[]) => void
      }
      let writes = 0
      for (const name of ['_write', '_writev'] as const) {
        const original = socket[name].bind(socket)
        socket[name] = (...args: unknown[]) => {
          writes += 1
          original(...args)
        }
      }
      const path = join(agent.outputs, 'gathered.bin')
      expect(await requestWriteFile(connection, path, bytesOf(...pieces))).toBe(bytes.byteLength)
      expect((await readFile(path)).equals(bytes)).toBe(true)
      // The request, three gathered megabytes (16 + 16 + 8 pieces), the end.
      expect(writes).toBeLessThanOrEqual(6)
    })

    it('a write whose byte count differs from the declared size leaves the old file as it was', async () => {
      const path = join(agent.outputs, 'keep.txt')
      await writeFile(path, 'original')
      await expect(
        requestWriteFile(await agent.connect(), path, bytesOf(Buffer.from('short')), { size: 100 }),
      ).rejects.toMatchObject({
        code: 'size-mismatch',
      })
      await expect(
        requestWriteFile(await agent.connect(), path, bytesOf(Buffer.from('too long')), {
          size: 2,
        }),
      ).rejects.toMatchObject({
        code: 'size-mismatch',
      })
      expect(await readFile(path, 'utf8')).toBe('original')
      const names = (await requestListFiles(await agent.connect(), agent.outputs)).map(
        (entry) => entry.path,
      )
      expect(names.filter((name) => name.includes('cordon-upload'))).toEqual([])
    })

    it('jails paths after resolving links', async () => {
      await mkdir(join(agent.dir, 'secret-place'))
      await writeFile(join(agent.dir, 'secret-place/data.txt'), 'do not read')
      await symlink(join(agent.dir, 'secret-place'), join(agent.outputs, 'escape'))
      await symlink(join(agent.dir, 'secret-place/data.txt'), join(agent.outputs, 'escape.txt'))
      const refused = async (promise: Promise<unknown>): Promise<void> => {
        await expect(promise).rejects.toMatchObject({ code: 'path-refused' })
      }
      await refused(requestReadFile(await agent.connect(), join(agent.outputs, 'escape/data.txt')))
      await refused(requestReadFile(await agent.connect(), join(agent.outputs, 'escape.txt')))
      await refused(
        requestReadFile(await agent.connect(), `${agent.outputs}/../secret-place/data.txt`),
      )
      await refused(
        requestWriteFile(
          await agent.connect(),
          join(agent.outputs, 'escape/new.txt'),
          bytesOf(Buffer.from('x')),
        ),
      )
      await refused(
        requestWriteFile(
          await agent.connect(),
          '/etc/cordon-should-not-exist',
          bytesOf(Buffer.from('x')),
        ),
      )
      await refused(requestListFiles(await agent.connect(), '/etc'))
      expect(existsSync(join(agent.dir, 'secret-place/new.txt'))).toBe(false)
    })

    it('reports a missing file as not-found and lists only regular files, recursively', async () => {
      await expect(
        requestReadFile(await agent.connect(), join(agent.outputs, 'nope')),
      ).rejects.toBeInstanceOf(AgentRemoteError)
      await mkdir(join(agent.outputs, 'tree/sub'), { recursive: true })
      await writeFile(join(agent.outputs, 'tree/a'), 'aa')
      await writeFile(join(agent.outputs, 'tree/sub/b'), 'bbb')
      await symlink('a', join(agent.outputs, 'tree/link'))
      const entries = await requestListFiles(await agent.connect(), join(agent.outputs, 'tree'))
      expect(entries.map((entry) => [entry.path, entry.size]).sort()).toEqual([
        [join(agent.outputs, 'tree/a'), 2],
        [join(agent.outputs, 'tree/sub/b'), 3],
      ])
      expect(await requestListFiles(await agent.connect(), join(agent.outputs, 'missing'))).toEqual(
        [],
      )
    })
  })
})

describe('agent program: resume, listeners, configuration', () => {
  it('the CommonJS build (what the Docker backend runs) is the same program', async () => {
    const cjs = await startAgentProcess({
      program: AGENT_PROGRAM.replace(/\.mjs$/, '.cjs'),
      env: { CORDON_AGENT_LAUNCHER: LAUNCHER_PROGRAM },
    })
    try {
      const connection = await cjs.connect()
      let stdout = ''
      const session = await requestExec(
        connection,
        { command: 'sh', args: ['-c', 'echo from-cjs'], env: {}, stdin: false },
        { onStdout: (bytes) => (stdout += Buffer.from(bytes).toString()) },
      )
      expect((await session.result).exitCode).toBe(0)
      expect(stdout).toBe('from-cjs\n')
      expect(cjs.child.spawnargs.at(-1)).toMatch(/cordon-agent\.cjs$/)
    } finally {
      await cjs.stop()
    }
  })

  it('on SIGHUP runs the re-seed hook, takes a newly delivered secret and listens again', async () => {
    const hookDir = await mkdtemp(join(tmpdir(), 'cordon-hook-'))
    const hook = join(hookDir, 'reseed.sh')
    await writeFile(hook, `#!/bin/sh\necho ran >> ${hookDir}/hook-ran\nhead -c 32 /dev/urandom\n`)
    await chmod(hook, 0o755)
    const agent = await startAgentProcess({ env: { CORDON_AGENT_RESEED_HOOK: hook } })
    try {
      const oldSecret = agent.secret
      expect((await requestHealth(await agent.connect())).resumes).toBe(0)
      const newSecret = `rotated-secret-${Date.now()}`
      await writeFile(join(agent.dir, 'secret'), newSecret)
      agent.child.kill('SIGHUP')
      for (let i = 0; i < 100 && !agent.stderr().includes('resumed and listening again'); i++)
        await delay(50)
      expect(existsSync(join(agent.dir, 'secret'))).toBe(false)
      expect(await readFile(join(hookDir, 'hook-ran'), 'utf8')).toBe('ran\n')
      await expect(agent.connect({ secret: oldSecret })).rejects.toMatchObject({
        code: 'unauthorized',
      })
      agent.secret = newSecret
      expect((await requestHealth(await agent.connect())).resumes).toBe(1)
    } finally {
      await agent.stop()
      await rm(hookDir, { recursive: true, force: true })
    }
  })

  it('listens on TCP and on an inherited descriptor', async () => {
    const tcp = await startAgentProcess({ listen: 'tcp:127.0.0.1:0', secretVia: 'env' })
    try {
      const port = tcpPortOf(tcp)
      const { connect } = await import('node:net')
      const socket = connect(port, '127.0.0.1')
      await new Promise((resolve) => socket.once('connect', resolve))
      const { authenticateToAgent } = await import('../src/protocol/index.js')
      const connection = new FramedConnection(socket)
      await authenticateToAgent(connection, tcp.secret)
      expect((await requestHealth(connection)).type).toBe('health-ok')
    } finally {
      await tcp.stop()
    }

    // A supervisor (systemd-style socket activation) hands the agent a listening socket as fd 3.
    const server = createServer()
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
    const inheritedPort = (server.address() as { port: number }).port
    const fd = (server as unknown as { _handle: { fd: number } })._handle.fd
    const inherited = await startAgentProcess({ listen: 'fd:3', stdio3: fd })
    // The child holds its own copy; the parent stops accepting on it.
    server.close()
    try {
      const { connect } = await import('node:net')
      const socket = connect(inheritedPort, '127.0.0.1')
      await new Promise((resolve) => socket.once('connect', resolve))
      const { authenticateToAgent } = await import('../src/protocol/index.js')
      const connection = new FramedConnection(socket)
      await authenticateToAgent(connection, inherited.secret)
      expect((await requestHealth(connection)).type).toBe('health-ok')
    } finally {
      await inherited.stop()
    }
  })

  it('refuses to start without a secret, or with a short one, and scrubs nothing into children', async () => {
    const attempt = (
      env: Record<string, string>,
    ): Promise<{ code: number | null; stderr: string }> =>
      new Promise((resolve) => {
        const child = spawn(process.execPath, [AGENT_PROGRAM], {
          env: { PATH: process.env.PATH ?? '', ...env },
          stdio: ['ignore', 'ignore', 'pipe'],
        })
        let stderr = ''
        child.stderr.on('data', (chunk: Buffer) => (stderr += chunk.toString()))
        child.on('exit', (code) => resolve({ code, stderr }))
      })
    const none = await attempt({ CORDON_AGENT_LISTEN: 'unix:/tmp/cordon-never.sock' })
    expect(none.code).toBe(2)
    expect(none.stderr).toContain('never runs unauthenticated')
    const short = await attempt({
      CORDON_AGENT_LISTEN: 'unix:/tmp/cordon-never.sock',
      CORDON_AGENT_SECRET: 'short',
    })
    expect(short.code).toBe(2)
    expect(short.stderr).toContain('at least 16')
    const badListen = await attempt({
      CORDON_AGENT_LISTEN: 'tcp:7000',
      CORDON_AGENT_SECRET: 'x'.repeat(20),
    })
    expect(badListen.stderr).toContain('explicit host')
  })
})

describe('agent program signals', () => {
  it('a resume or stop signal sent the moment the agent says it listens is handled, never fatal', async () => {
    // The supervisor's side, without polling: the signal goes out from the
    // very 'data' event that carries the log line.
    for (const [signal, expected] of [
      ['SIGHUP', 'agent resumed'],
      ['SIGTERM', 'exit'],
    ] as const) {
      for (let round = 0; round < 3; round++) {
        const dir = await mkdtemp(join(tmpdir(), 'cordon-agent-signal-'))
        await writeFile(join(dir, 'secret'), 'signal-test-secret-0123456789', { mode: 0o600 })
        const child = spawn(process.execPath, [AGENT_PROGRAM], {
          env: {
            PATH: process.env.PATH ?? '/usr/bin:/bin',
            CORDON_AGENT_LISTEN: `unix:${join(dir, 'agent.sock')}`,
            CORDON_AGENT_SECRET_FILE: join(dir, 'secret'),
            CORDON_AGENT_WRITE_ROOTS: dir,
          },
          stdio: ['ignore', 'ignore', 'pipe'],
        })
        let stderr = ''
        const exited = new Promise<[number | null, string | null]>((resolve) =>
          child.once('exit', (code, killedBy) => resolve([code, killedBy])),
        )
        child.stderr!.on('data', (chunk: Buffer) => {
          const first = !stderr.includes('agent listening')
          stderr += chunk.toString()
          if (first && stderr.includes('agent listening')) child.kill(signal)
        })
        try {
          if (expected === 'exit') {
            // Stopped as asked: its own status, not killed by the signal.
            expect(await exited, stderr).toEqual([0, null])
          } else {
            await expect.poll(() => stderr, { timeout: 5_000 }).toContain(expected)
            expect(child.exitCode, stderr).toBe(null)
          }
        } finally {
          child.kill('SIGKILL')
          await exited
          await rm(dir, { recursive: true, force: true })
        }
      }
    }
  })
})
