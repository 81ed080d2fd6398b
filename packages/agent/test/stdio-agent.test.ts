/**
 * The agent as a container's entry process: its channel is its own stdin and
 * stdout, carrying a stream multiplexer. Run here as a child process of the
 * test (as root, like the agent in a Docker sandbox), with commands and file
 * operations as an unprivileged user.
 */
import { type ChildProcess, spawn } from 'node:child_process'
import { once } from 'node:events'
import { existsSync } from 'node:fs'
import { chmod, chown, mkdir, mkdtemp, readFile, rm, symlink, writeFile } from 'node:fs/promises'
import { connect, type Socket } from 'node:net'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { type MuxStream, StreamMux } from '../src/protocol/index.js'
import { AgentClient } from '../src/sandbox/index.js'
import { AGENT_PROGRAM } from './agent-harness.js'

const NOBODY = { uid: 65534, gid: 65534 }

interface StdioAgent {
  readonly child: ChildProcess
  readonly mux: StreamMux
  readonly client: AgentClient
  readonly dir: string
  readonly outputs: string
  stderr(): string
  readonly egress: MuxStream[]
  readonly secret: string
  /** The agent's direct socket, with `directSocket: true`. */
  readonly directSocketPath: string
  /** Writes the secret line, with `holdSecret: true` (otherwise it is written at start). */
  sendSecret(): void
}

async function startStdioAgent(
  env: Record<string, string> = {},
  options: { directSocket?: boolean; holdSecret?: boolean } = {},
): Promise<StdioAgent> {
  const dir = await mkdtemp(join(tmpdir(), 'cordon-stdio-agent-'))
  await chmod(dir, 0o755)
  const outputs = join(dir, 'out')
  await mkdir(outputs)
  await chown(outputs, NOBODY.uid, NOBODY.gid)
  const secret = `stdio-secret-${Date.now()}-0123456789`
  const directSocketPath = join(dir, 'direct.sock')
  const child = spawn(process.execPath, [AGENT_PROGRAM], {
    env: {
      PATH: process.env.PATH ?? '/usr/bin:/bin',
      CORDON_AGENT_LISTEN: 'stdio',
      // As the Docker backend does it: the secret is the first line on stdin.
      CORDON_AGENT_SECRET_STDIN: '1',
      CORDON_AGENT_WRITE_ROOTS: outputs,
      CORDON_AGENT_RUN_AS: `${NOBODY.uid}:${NOBODY.gid}`,
      ...(options.directSocket ? { CORDON_AGENT_DIRECT_SOCKET: directSocketPath } : {}),
      ...env,
    },
    stdio: ['pipe', 'pipe', 'pipe'],
  })
  let stderr = ''
  child.stderr!.on('data', (chunk: Buffer) => {
    stderr += chunk.toString()
  })
  const egress: MuxStream[] = []
  const sendSecret = (): void => {
    child.stdin!.write(`${secret}\n`)
  }
  if (!options.holdSecret) sendSecret()
  const mux = new StreamMux(child.stdout!, child.stdin!, {
    initiator: true,
    onStream: (stream, opening) => {
      if (opening.kind === 'egress') egress.push(stream)
      else stream.destroy()
    },
  })
  const client = new AgentClient({
    secret,
    description: 'stdio',
    dial: async (_signal, kind) => mux.open({ kind }),
    heartbeatMs: 1_000,
  })
  return {
    child,
    mux,
    client,
    dir,
    outputs,
    stderr: () => stderr,
    egress,
    secret,
    directSocketPath,
    sendSecret,
  }
}

async function stop(agent: StdioAgent | undefined): Promise<void> {
  if (!agent) return
  if (agent.child.exitCode === null) {
    agent.child.stdin!.end()
    await once(agent.child, 'exit')
  }
  await rm(agent.dir, { recursive: true, force: true })
}

async function run(agent: StdioAgent, command: string, args: string[]): Promise<string> {
  return runIn(agent, agent.outputs, command, args)
}

async function runIn(
  agent: StdioAgent,
  cwd: string,
  command: string,
  args: string[],
): Promise<string> {
  let out = ''
  const session = await agent.client.startExec(
    { command, args, env: {}, cwd, stdin: false },
    { onStdout: (bytes) => (out += Buffer.from(bytes).toString()), onStderr: () => {} },
  )
  await session.result
  return out
}

async function* bytes(text: string): AsyncGenerator<Uint8Array> {
  yield Buffer.from(text)
}

async function read(agent: StdioAgent, path: string): Promise<string> {
  const download = await agent.client.readFile(path)
  const chunks: Uint8Array[] = []
  for await (const chunk of download.chunks) chunks.push(chunk)
  return Buffer.concat(chunks).toString()
}

describe('the agent on its stdio channel', () => {
  let agent: StdioAgent
  beforeAll(async () => {
    agent = await startStdioAgent({ CORDON_AGENT_EGRESS_PORT: '0' })
  })
  afterAll(() => stop(agent))

  it('runs commands as the sandbox user, never as its own', async () => {
    expect(await run(agent, 'id', ['-u'])).toBe(`${NOBODY.uid}\n`)
    expect(await run(agent, 'id', ['-g'])).toBe(`${NOBODY.gid}\n`)
    expect(await run(agent, 'sh', ['-c', 'grep CapEff /proc/self/status'])).toBe(
      'CapEff:\t0000000000000000\n',
    )
  })

  it('keeps its secret out of its environment: it came as the first line on stdin', async () => {
    const environ = await readFile(`/proc/${agent.child.pid}/environ`, 'utf8')
    expect(environ).not.toMatch(/stdio-secret-/)
    expect(environ).not.toContain('CORDON_AGENT_SECRET=')
    // Commands, even as another user, see none of it in their own environment either.
    expect(await run(agent, 'sh', ['-c', 'env'])).not.toContain('CORDON_AGENT')
  })

  it("does file operations with the sandbox user's rights: a link to a root-only file is refused", async () => {
    const secretFile = join(agent.dir, 'root-only')
    await writeFile(secretFile, 'root secret', { mode: 0o600 })
    await symlink(agent.dir, join(agent.outputs, 'rootlink'))
    const refused = await read(agent, join(agent.outputs, 'rootlink/root-only')).catch(
      (error: unknown) => error,
    )
    expect((refused as Error).name).toBe('SandboxPathError')
    await agent.client.writeFile(
      join(agent.outputs, 'mine.txt'),
      (async function* () {
        yield Buffer.from('written as the user')
      })(),
      {},
    )
    expect(await run(agent, 'stat', ['-c', '%u', join(agent.outputs, 'mine.txt')])).toBe(
      `${NOBODY.uid}\n`,
    )
    expect(await read(agent, join(agent.outputs, 'mine.txt'))).toBe('written as the user')
  })

  it('writes as the sandbox user, and no group of root grants it anything', async () => {
    await agent.client.writeFile(join(agent.outputs, 'made/by/host.txt'), bytes('hello'), {})
    const owners = await run(agent, 'stat', [
      '-c',
      '%u:%g',
      join(agent.outputs, 'made'),
      join(agent.outputs, 'made/by/host.txt'),
    ])
    expect(owners).toBe(`${NOBODY.uid}:${NOBODY.gid}\n`.repeat(2))
    // Group-readable by root's group only: root's supplementary groups are dropped.
    const groupOnly = join(agent.outputs, 'root-group.txt')
    await writeFile(groupOnly, 'group secret\n', { mode: 0o640 })
    await chown(groupOnly, 0, 0)
    await expect(read(agent, groupOnly)).rejects.toThrow(/EACCES|refused/)
    // A directory of root's inside the roots cannot be written into.
    const rootDir = join(agent.outputs, 'root-only')
    await mkdir(rootDir, { mode: 0o755 })
    await expect(agent.client.writeFile(join(rootDir, 'x.txt'), bytes('x'), {})).rejects.toThrow(
      /EACCES|refused/,
    )
  })

  it("makes a command's missing working directory first, as the sandbox user", async () => {
    const cwd = join(agent.outputs, 'cwd/made/first')
    const out = await runIn(agent, cwd, 'sh', ['-c', 'pwd; stat -c %u:%g . ..'])
    expect(out).toBe(`${cwd}\n${`${NOBODY.uid}:${NOBODY.gid}\n`.repeat(2)}`)
    // One that exists is left as it is.
    expect(await runIn(agent, cwd, 'pwd', [])).toBe(`${cwd}\n`)
  })

  it('makes a missing working directory only where the sandbox user could, and only inside the write roots', async () => {
    const refusedAt = async (cwd: string): Promise<unknown> =>
      runIn(agent, cwd, 'pwd', []).catch((error: unknown) => error)
    // Outside every write root (root could make it; the host may not).
    const outside = join(agent.dir, 'outside/cwd')
    const error = await refusedAt(outside)
    expect(error).toMatchObject({ name: 'SandboxPathError', path: outside })
    expect((error as Error).message).toMatch(/outside the write roots/)
    // Through a link that leads out of the roots.
    await symlink(agent.dir, join(agent.outputs, 'cwd-link-out'))
    expect(await refusedAt(join(agent.outputs, 'cwd-link-out/escaped'))).toMatchObject({
      name: 'SandboxPathError',
    })
    // Inside a directory of root's that the user cannot write.
    const rootsOwn = join(agent.outputs, 'cwd-root-owned')
    await mkdir(rootsOwn, { mode: 0o755 })
    expect(await refusedAt(join(rootsOwn, 'child'))).toMatchObject({ name: 'SandboxPathError' })
    // Under a file.
    await writeFile(join(agent.outputs, 'cwd-file'), 'x')
    expect(await refusedAt(join(agent.outputs, 'cwd-file'))).toMatchObject({
      name: 'SandboxPathError',
    })
    expect(await refusedAt(join(agent.outputs, 'cwd-file/under'))).toMatchObject({
      name: 'SandboxPathError',
    })
    for (const path of [outside, join(agent.dir, 'escaped'), join(rootsOwn, 'child')])
      expect(existsSync(path), path).toBe(false)
  })

  it('answers make-directory: made as the user inside the roots, refused outside', async () => {
    const made = join(agent.outputs, 'workdir/a/b')
    expect(await agent.client.makeDirectory(made)).toBe(true)
    expect(await agent.client.makeDirectory(made)).toBe(false)
    expect(await run(agent, 'stat', ['-c', '%u', made])).toBe(`${NOBODY.uid}\n`)
    // An existing directory anywhere is fine: commands may run in it.
    expect(await agent.client.makeDirectory('/tmp')).toBe(false)
    await expect(agent.client.makeDirectory(join(agent.dir, 'nope'))).rejects.toMatchObject({
      name: 'SandboxPathError',
    })
  })

  it('forwards each connection to its egress port to the host as a stream, with half-close', async () => {
    await waitFor(() => /"egressPort":\d+/.test(agent.stderr()))
    const port = Number(/"egressPort":(\d+)/.exec(agent.stderr())?.[1])
    const client = connect(port, '127.0.0.1')
    await once(client, 'connect')
    client.end('request, then end of input')
    await waitFor(() => agent.egress.length === 1)
    const stream = agent.egress[0]!
    const chunks: Buffer[] = []
    for await (const chunk of stream.iterator({ destroyOnReturn: false })) chunks.push(chunk)
    expect(Buffer.concat(chunks).toString()).toBe('request, then end of input')
    // The client's write side is shut; the answer still reaches it.
    stream.end('the answer')
    const answer: Buffer[] = []
    for await (const chunk of client) answer.push(chunk)
    expect(Buffer.concat(answer).toString()).toBe('the answer')
  })
})

describe('the agent ends with its channel', () => {
  it('exits when the host closes stdin', async () => {
    const agent = await startStdioAgent()
    expect(await run(agent, 'echo', ['up'])).toBe('up\n')
    agent.child.stdin!.end()
    const [code] = await once(agent.child, 'exit')
    expect(code).toBe(0)
    await stop(agent)
  })

  it('refuses to start when the secret line is missing or short', async () => {
    for (const preface of ['', 'short\n']) {
      const child = spawn(process.execPath, [AGENT_PROGRAM], {
        env: {
          PATH: process.env.PATH ?? '/usr/bin:/bin',
          CORDON_AGENT_LISTEN: 'stdio',
          CORDON_AGENT_SECRET_STDIN: '1',
        },
        stdio: ['pipe', 'pipe', 'pipe'],
      })
      let stderr = ''
      child.stderr!.on('data', (chunk: Buffer) => {
        stderr += chunk.toString()
      })
      child.stdin!.end(preface)
      const [code] = await once(child, 'exit')
      expect(code, JSON.stringify(preface)).not.toBe(0)
      expect(stderr).toMatch(/secret line/)
    }
  })

  it('listens on its direct socket before its secret has come, and answers a connection made meanwhile once it has', async () => {
    const agent = await startStdioAgent({}, { directSocket: true, holdSecret: true })
    try {
      let socket: Socket | undefined
      while (!socket) {
        socket = await new Promise<Socket | undefined>((resolve) => {
          const attempt = connect(agent.directSocketPath)
          attempt.once('connect', () => resolve(attempt))
          attempt.once('error', () => setTimeout(() => resolve(undefined), 5))
        })
      }
      const connected = socket
      const direct = new AgentClient({
        secret: agent.secret,
        description: 'direct',
        dial: async () => connected,
        heartbeatMs: 1_000,
      })
      let answered = false
      const health = direct.health().then((answer) => {
        answered = true
        return answer
      })
      // No secret yet: the proof waits for it.
      await new Promise((resolve) => setTimeout(resolve, 300))
      expect(answered).toBe(false)
      agent.sendSecret()
      expect((await health).pid).toBe(agent.child.pid)
      direct.close()
    } finally {
      await stop(agent)
    }
  })

  it('exits when its lifetime runs out, whatever the host does', async () => {
    const agent = await startStdioAgent({ CORDON_AGENT_LIFETIME_MS: '300' })
    const [code] = await once(agent.child, 'exit')
    expect(code).toBe(0)
    expect(agent.stderr()).toContain('lifetime reached')
    await stop(agent)
  })
})

async function waitFor(condition: () => boolean): Promise<void> {
  for (let i = 0; i < 200 && !condition(); i++)
    await new Promise((resolve) => setTimeout(resolve, 10))
  expect(condition()).toBe(true)
}

/** An agent client that dials the unix socket at `path` for each connection. */
function socketClient(path: string, secret: string): AgentClient {
  return new AgentClient({
    secret,
    description: path,
    dial: () =>
      new Promise<Socket>((resolve, reject) => {
        const socket = connect(path)
        socket.once('connect', () => resolve(socket))
        socket.once('error', reject)
      }),
    heartbeatMs: 1_000,
  })
}

describe('a detached agent (CORDON_AGENT_DETACHED)', () => {
  it('outlives its channel: it serves its direct socket, and a relay to it, until its lifetime ends it', async () => {
    const agent = await startStdioAgent(
      { CORDON_AGENT_DETACHED: '1', CORDON_AGENT_LIFETIME_MS: '8000' },
      { directSocket: true },
    )
    try {
      await run(agent, 'sh', ['-c', 'echo kept > kept.txt'])
      // The creating host goes away: its channel closes.
      agent.client.close()
      agent.mux.close()
      agent.child.stdin!.end()
      await new Promise((resolve) => setTimeout(resolve, 500))
      expect(agent.child.exitCode).toBeNull()

      // Another host, holding the secret, reaches it on the socket...
      const direct = socketClient(agent.directSocketPath, agent.secret)
      expect((await direct.health()).pid).toBe(agent.child.pid)
      direct.close()
      // ...or through a relay started beside it, which holds no secret of its own.
      const relay = spawn(process.execPath, [AGENT_PROGRAM, '--relay', agent.directSocketPath], {
        stdio: ['pipe', 'pipe', 'pipe'],
      })
      const relayed = new StreamMux(relay.stdout!, relay.stdin!, { initiator: true })
      const through = new AgentClient({
        secret: agent.secret,
        description: 'relay',
        dial: async (_signal, kind) => relayed.open({ kind }),
        heartbeatMs: 1_000,
      })
      const download = await through.readFile(join(agent.outputs, 'kept.txt'))
      const chunks: Uint8Array[] = []
      for await (const chunk of download.chunks) chunks.push(chunk)
      expect(Buffer.concat(chunks).toString()).toBe('kept\n')
      // A host without the secret is refused on the same way.
      const impostor = new AgentClient({
        secret: 'not-the-secret-0123456789',
        description: 'relay',
        dial: async (_signal, kind) => relayed.open({ kind }),
      })
      await expect(impostor.health()).rejects.toThrow()
      through.close()
      impostor.close()
      relay.stdin!.end()
      const [relayCode] = await once(relay, 'exit')
      expect(relayCode).toBe(0)

      // The lifetime ends it with no host around.
      const [code] = await once(agent.child, 'exit')
      expect(code).toBe(0)
      expect(agent.stderr()).toMatch(/lifetime reached/)
    } finally {
      await stop(agent)
    }
  }, 60_000)

  it('refuses to start detached without a direct socket or a lifetime', async () => {
    const agent = await startStdioAgent({ CORDON_AGENT_DETACHED: '1' })
    const [code] = await once(agent.child, 'exit')
    expect(code).not.toBe(0)
    expect(agent.stderr()).toMatch(/CORDON_AGENT_DETACHED needs/)
    await stop(agent)
  })
})
