/**
 * The standalone `cordon-egress` command, spawned as a real process from the
 * built output (run `tsc --build` first; turbo's test task depends on build).
 */
import { type ChildProcess, spawn } from 'node:child_process'
import { existsSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs'
import { createServer } from 'node:net'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { fileURLToPath } from 'node:url'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { EGRESS_DENIED_HEADER } from '../src/index.js'
import { openTunnel, rawExchange, sleep, startUpstream, type Upstream } from './helpers.js'

const CLI = fileURLToPath(new URL('../dist/cli.js', import.meta.url))
const TOKEN = 'test-token-0123456789abcdef0123456789'

function freePort(): Promise<number> {
  return new Promise((resolve) => {
    const server = createServer()
    server.listen(0, '127.0.0.1', () => {
      const address = server.address()
      const port = typeof address === 'object' && address !== null ? address.port : 0
      server.close(() => resolve(port))
    })
  })
}

interface Spawned {
  readonly child: ChildProcess
  readonly lines: Record<string, unknown>[]
  readonly stderr: () => string
  nextLine(predicate: (line: Record<string, unknown>) => boolean): Promise<Record<string, unknown>>
  exited: Promise<number | null>
}

function spawnCli(args: readonly string[], env: Record<string, string> = {}): Spawned {
  const child = spawn(process.execPath, [CLI, ...args], {
    env: { PATH: process.env.PATH ?? '', ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  })
  const lines: Record<string, unknown>[] = []
  let pending = ''
  let errors = ''
  child.stdout?.on('data', (chunk: Buffer) => {
    pending += chunk.toString('utf8')
    let newline = pending.indexOf('\n')
    while (newline !== -1) {
      lines.push(JSON.parse(pending.slice(0, newline)) as Record<string, unknown>)
      pending = pending.slice(newline + 1)
      newline = pending.indexOf('\n')
    }
  })
  child.stderr?.on('data', (chunk: Buffer) => {
    errors += chunk.toString('utf8')
  })
  const exited = new Promise<number | null>((resolve) =>
    child.once('exit', (code) => resolve(code)),
  )
  let seen = 0
  return {
    child,
    lines,
    stderr: () => errors,
    exited,
    async nextLine(predicate) {
      for (let attempt = 0; attempt < 500; attempt += 1) {
        const index = lines.findIndex((line, position) => position >= seen && predicate(line))
        if (index !== -1) {
          seen = index + 1
          return lines[index]!
        }
        await sleep(10)
      }
      throw new Error(
        `no matching line; stdout so far: ${JSON.stringify(lines)}; stderr: ${errors}`,
      )
    },
  }
}

describe('cordon-egress', () => {
  let dir: string
  let upstream: Upstream
  let controlPort: number
  let cli: Spawned
  let proxyPort: number

  const control = (method: string, path: string, body?: unknown, token: string | null = TOKEN) =>
    fetch(`http://127.0.0.1:${controlPort}${path}`, {
      method,
      headers: {
        ...(token === null ? {} : { authorization: `Bearer ${token}` }),
        ...(body === undefined ? {} : { 'content-type': 'application/json' }),
      },
      body: body === undefined ? undefined : JSON.stringify(body),
      signal: AbortSignal.timeout(5_000),
    })
  const viaProxy = (path = '/') =>
    rawExchange(
      proxyPort,
      `GET http://localhost:${upstream.port}${path} HTTP/1.1\r\nConnection: close\r\n\r\n`,
    )

  beforeAll(async () => {
    expect(existsSync(CLI), `${CLI} is missing: build the package first (npx tsc --build)`).toBe(
      true,
    )
    dir = mkdtempSync(join(tmpdir(), 'cordon-egress-cli-'))
    upstream = await startUpstream()
    controlPort = await freePort()
    const config = {
      listen: { host: '127.0.0.1', port: 0 },
      control: { host: '127.0.0.1', port: controlPort, token: TOKEN },
      requireClientPolicy: true,
      allowInwardFor: ['localhost'],
      allowedPorts: [upstream.port, controlPort],
    }
    writeFileSync(join(dir, 'egress.json'), JSON.stringify(config))
    cli = spawnCli(['--config', join(dir, 'egress.json')])
    const listening = await cli.nextLine((line) => line.type === 'listening')
    proxyPort = (listening.proxy as { port: number }).port
    expect(listening.control).toMatchObject({
      port: controlPort,
      url: `http://127.0.0.1:${controlPort}`,
    })
  })

  afterAll(async () => {
    if (cli !== undefined && cli.child.exitCode === null) {
      cli.child.kill('SIGKILL')
      await cli.exited
    }
    await upstream?.close()
    rmSync(dir, { recursive: true, force: true })
  })

  it('answers the health check without a token', async () => {
    const response = await control('GET', '/healthz', undefined, null)
    expect(response.status).toBe(200)
    expect(await response.json()).toEqual({ ok: true })
  })

  it('refuses control requests without the right bearer token', async () => {
    const registration = { clientId: 'x', policy: { kind: 'allow-all' } }
    expect((await control('PUT', '/clients/127.0.0.1', registration, null)).status).toBe(401)
    expect((await control('PUT', '/clients/127.0.0.1', registration, `${TOKEN}x`)).status).toBe(401)
    expect((await control('DELETE', '/clients/127.0.0.1', undefined, 'short')).status).toBe(401)
  })

  it('refuses an unregistered client and reports the decision as a JSON line', async () => {
    const response = await viaProxy()
    expect(response.status).toBe(403)
    expect(response.headers[EGRESS_DENIED_HEADER]).toBe('client-unknown')
    expect(await cli.nextLine((line) => line.type === 'egress')).toMatchObject({
      decision: 'deny',
      reason: 'client-unknown',
      host: 'localhost',
      clientAddress: '127.0.0.1',
    })
  })

  it('registers a client over the control endpoint and serves it under its policy', async () => {
    const sandboxId = 'sbx_abcdefghijklmnopqrstuvwxyz'
    const put = await control('PUT', '/clients/127.0.0.1', {
      clientId: sandboxId,
      policy: { kind: 'static', allowedHosts: ['localhost'] },
    })
    expect(put.status).toBe(204)
    const response = await viaProxy('/registered')
    expect(response.status).toBe(200)
    expect(upstream.requests.at(-1)?.url).toBe('/registered')
    expect(await cli.nextLine((line) => line.type === 'egress')).toMatchObject({
      decision: 'allow',
      clientId: sandboxId,
      sandboxId,
      address: '127.0.0.1',
    })
  })

  it('never lets a client reach the control endpoint through the proxy', async () => {
    const tunnel = await openTunnel(proxyPort, `localhost:${controlPort}`)
    expect(tunnel.response.headers[EGRESS_DENIED_HEADER]).toBe('address-proxy-self')
  })

  it('rejects an invalid registration with every problem listed', async () => {
    const response = await control('PUT', '/clients/127.0.0.9', {
      clientId: '',
      policy: { kind: 'static', allowedHosts: ['*.example.com'] },
    })
    expect(response.status).toBe(400)
    const body = (await response.json()) as { issues: { path: string }[] }
    expect(body.issues.map((issue) => issue.path).sort()).toEqual([
      'clientId',
      'policy.allowedHosts.0',
    ])
    expect(
      (await control('PUT', '/clients/not-an-ip', { clientId: 'a', policy: { kind: 'deny-all' } }))
        .status,
    ).toBe(400)
  })

  it('removes a client, after which it is refused again', async () => {
    expect((await control('DELETE', '/clients/127.0.0.1')).status).toBe(204)
    expect((await control('DELETE', '/clients/127.0.0.1')).status).toBe(404)
    expect((await viaProxy()).headers[EGRESS_DENIED_HEADER]).toBe('client-unknown')
  })

  it('exits 0 on SIGTERM', async () => {
    cli.child.kill('SIGTERM')
    expect(await Promise.race([cli.exited, sleep(15_000).then(() => 'still running')])).toBe(0)
  })

  it('exits 2 with every config problem on stderr, taking the config from the environment', async () => {
    const bad = spawnCli([], {
      CORDON_EGRESS_CONFIG: JSON.stringify({
        control: { token: 'short' },
        allowedPorts: [0],
        polcy: {},
      }),
    })
    expect(await Promise.race([bad.exited, sleep(15_000).then(() => 'still running')])).toBe(2)
    expect(bad.stderr()).toMatch(/control\.token/)
    expect(bad.stderr()).toMatch(/allowedPorts\.0/)
    expect(bad.stderr()).toMatch(/polcy/)
    const missing = spawnCli([])
    expect(await Promise.race([missing.exited, sleep(15_000).then(() => 'still running')])).toBe(2)
    expect(missing.stderr()).toMatch(/CORDON_EGRESS_CONFIG/)
  })
})
