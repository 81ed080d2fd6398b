import { type ChildProcess, execFileSync, spawn } from 'node:child_process'
import { mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { agentProgramPath } from '@cordon/agent'
import { newAgentSecret } from '@cordon/agent/protocol'

export interface HostAgent {
  readonly dir: string
  readonly socketPath: string
  readonly secret: string
  readonly child: ChildProcess
  stderr(): string
  stop(): Promise<void>
}

/**
 * The real bundled agent, run on this host (no container) listening on a unix
 * socket: what transport tests talk to.
 */
export async function startHostAgent(options: { secret?: string } = {}): Promise<HostAgent> {
  const dir = await mkdtemp(join(tmpdir(), 'cordon-host-agent-'))
  await mkdir(join(dir, 'out'))
  const socketPath = join(dir, 'agent.sock')
  const secret = options.secret ?? newAgentSecret()
  await writeFile(join(dir, 'secret'), secret, { mode: 0o600 })
  let stderr = ''
  let child!: ChildProcess
  const launch = (): void => {
    child = spawn(process.execPath, [agentProgramPath()], {
      env: {
        PATH: process.env.PATH ?? '/usr/bin:/bin',
        CORDON_AGENT_LISTEN: `unix:${socketPath}`,
        CORDON_AGENT_SECRET_FILE: join(dir, 'secret'),
        CORDON_AGENT_WRITE_ROOTS: join(dir, 'out'),
      },
      stdio: ['ignore', 'ignore', 'pipe'],
    })
    child.stderr!.on('data', (chunk: Buffer) => (stderr += chunk.toString()))
  }
  const agent: HostAgent = {
    dir,
    socketPath,
    secret,
    get child() {
      return child
    },
    stderr: () => stderr,
    async stop() {
      if (child && child.exitCode === null && child.signalCode === null) {
        const exited = new Promise((resolve) => child.once('exit', resolve))
        child.kill('SIGTERM')
        await exited
      }
      await rm(dir, { recursive: true, force: true })
    },
  }
  launch()
  await waitFor(
    () => stderr.includes('"agent listening"'),
    5_000,
    () => `agent did not start: ${stderr}`,
  )
  return agent
}

export async function waitFor(
  condition: () => boolean,
  timeoutMs: number,
  describe: () => string,
): Promise<void> {
  const until = Date.now() + timeoutMs
  while (!condition()) {
    if (Date.now() > until) throw new Error(describe())
    await new Promise((resolve) => setTimeout(resolve, 10))
  }
}

export interface TestPki {
  readonly ca: string
  readonly serverCert: string
  readonly serverKey: string
  readonly clientCert: string
  readonly clientKey: string
  /** A client certificate from a CA the servers do not trust. */
  readonly strangerCert: string
  readonly strangerKey: string
  readonly strangerCa: string
}

/** Mints a throwaway CA, a server certificate for localhost/127.0.0.1 and client certificates, with the openssl CLI. */
export async function makeTestPki(): Promise<TestPki & { cleanup(): Promise<void> }> {
  const dir = await mkdtemp(join(tmpdir(), 'cordon-pki-'))
  const ssl = (...args: string[]): void => {
    execFileSync('openssl', args, { cwd: dir, stdio: ['ignore', 'ignore', 'pipe'] })
  }
  const read = async (name: string): Promise<string> =>
    (await import('node:fs/promises')).readFile(join(dir, name), 'utf8')
  const makeCa = (name: string): void => {
    ssl(
      'req',
      '-x509',
      '-newkey',
      'ec',
      '-pkeyopt',
      'ec_paramgen_curve:P-256',
      '-nodes',
      '-keyout',
      `${name}.key`,
      '-out',
      `${name}.pem`,
      '-days',
      '2',
      '-subj',
      `/CN=${name}`,
    )
  }
  const issue = (name: string, ca: string): void => {
    ssl(
      'req',
      '-newkey',
      'ec',
      '-pkeyopt',
      'ec_paramgen_curve:P-256',
      '-nodes',
      '-keyout',
      `${name}.key`,
      '-out',
      `${name}.csr`,
      '-subj',
      `/CN=${name}`,
    )
    ssl(
      'x509',
      '-req',
      '-in',
      `${name}.csr`,
      '-CA',
      `${ca}.pem`,
      '-CAkey',
      `${ca}.key`,
      '-CAcreateserial',
      '-out',
      `${name}.pem`,
      '-days',
      '2',
      '-extfile',
      `${name}.ext`,
    )
  }
  makeCa('ca')
  makeCa('stranger-ca')
  await writeFile(
    join(dir, 'server.ext'),
    'subjectAltName=DNS:localhost,IP:127.0.0.1\nextendedKeyUsage=serverAuth\n',
  )
  await writeFile(join(dir, 'client.ext'), 'extendedKeyUsage=clientAuth\n')
  await writeFile(join(dir, 'stranger.ext'), 'extendedKeyUsage=clientAuth\n')
  issue('server', 'ca')
  issue('client', 'ca')
  issue('stranger', 'stranger-ca')
  return {
    ca: await read('ca.pem'),
    serverCert: await read('server.pem'),
    serverKey: await read('server.key'),
    clientCert: await read('client.pem'),
    clientKey: await read('client.key'),
    strangerCert: await read('stranger.pem'),
    strangerKey: await read('stranger.key'),
    strangerCa: await read('stranger-ca.pem'),
    cleanup: () => rm(dir, { recursive: true, force: true }),
  }
}
