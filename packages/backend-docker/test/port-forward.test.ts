import { execFile } from 'node:child_process'
import { chmod, stat } from 'node:fs/promises'
import { get } from 'node:http'
import { connect, createServer } from 'node:net'
import { networkInterfaces } from 'node:os'
import { dirname } from 'node:path'
import { promisify } from 'node:util'
import {
  type CordonSandbox,
  type CordonSandboxProvider,
  SandboxConfigValidationError,
} from '@cordon/core'
import { forwardDirectoriesRoot } from '@cordon/core/backend'
import { until } from '@cordon/test-support'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { testProvider } from './test-run.js'

const NOBODY = { uid: 65534, gid: 65534 }

/** Sends `request`, half-closes, and collects everything the other end says until it closes. */
function exchange(port: number, request: string): Promise<string> {
  return new Promise((resolve, reject) => {
    const socket = connect({ port, host: '127.0.0.1', allowHalfOpen: true })
    let reply = ''
    socket.on('data', (chunk: Buffer) => {
      reply += chunk.toString()
    })
    socket.on('error', reject)
    socket.on('close', () => resolve(reply))
    socket.end(request)
  })
}

/** GET `path` over a unix socket; the body. */
function getOverSocket(socketPath: string, path: string): Promise<string> {
  return new Promise((resolve, reject) => {
    get({ socketPath, path, host: 'localhost' }, (response) => {
      let body = ''
      response.on('data', (chunk: Buffer) => {
        body += chunk.toString()
      })
      response.on('end', () => resolve(body))
      response.on('error', reject)
    }).on('error', reject)
  })
}

/**
 * Connects to `socketPath` from a separate Node process running as `user`
 * (setting another uid needs root, as CI has; anything else fails the
 * test). Prints `connected` or the error's code.
 */
async function connectAs(user: { uid: number; gid: number }, socketPath: string): Promise<string> {
  const script = `require('node:net').connect(process.argv[1])
    .on('connect', () => { console.log('connected'); process.exit(0) })
    .on('error', (error) => { console.log(error.code); process.exit(0) })`
  const { stdout } = await promisify(execFile)(process.execPath, ['-e', script, socketPath], user)
  return stdout.trim()
}

/** A TCP port nothing listens on now. */
async function freePort(): Promise<number> {
  const server = createServer().listen(0, '127.0.0.1')
  await new Promise((resolve) => server.once('listening', resolve))
  const { port } = server.address() as { port: number }
  await new Promise((resolve) => server.close(resolve))
  return port
}

for (const runtime of ['docker', 'runsc'] as const) {
  describe(`port forwarding into a sandbox (${runtime})`, () => {
    let provider: CordonSandboxProvider
    let sandbox: CordonSandbox

    beforeAll(async () => {
      provider = testProvider({ runtime })
      sandbox = await provider.create()
      await sandbox.exec(
        'sh',
        ['-c', 'mkdir -p site && echo "preview from inside" > site/index.html'],
        { cwd: sandbox.rootDir },
      )
      // A dev server listening on the sandbox's loopback only.
      await sandbox.start('httpd', ['-f', '-p', '127.0.0.1:8080', '-h', `${sandbox.rootDir}/site`])
    })
    afterAll(async () => {
      await provider.close()
    })

    it('reaches a server on the sandbox loopback from a host address', async () => {
      const forward = await sandbox.forwardPort!(8080)
      try {
        expect(forward).toMatchObject({ sandboxPort: 8080, host: '127.0.0.1' })
        expect(forward.url).toBe(`http://127.0.0.1:${forward.port}`)
        let body = ''
        await until(async () => {
          body = await fetch(`${forward.url}/index.html`).then(
            (response) => response.text(),
            () => '',
          )
          return body !== ''
        })
        expect(body).toBe('preview from inside\n')
        // Several at once, each its own connection.
        const bodies = await Promise.all(
          Array.from({ length: 8 }, () => fetch(`${forward.url}/`).then((r) => r.text())),
        )
        expect(bodies).toEqual(Array(8).fill('preview from inside\n'))
        // The sandbox still has no interface but loopback.
        expect((await sandbox.exec('ls', ['/sys/class/net'])).stdout.trim()).toBe('lo')
      } finally {
        await forward.close()
      }
    })

    it('carries half-close both ways', async () => {
      const echo = await sandbox.start('nc', ['-l', '-p', '9000', '-e', 'cat'])
      const forward = await sandbox.forwardPort!(9000)
      try {
        let reply = ''
        await until(async () => {
          reply = await exchange(forward.port, 'half-closed hello').catch(() => '')
          return reply !== ''
        })
        expect(reply).toBe('half-closed hello')
      } finally {
        await forward.close()
        await echo.kill('SIGKILL')
      }
    })

    it('resets a connection to a port nothing listens on, and stops with close()', async () => {
      const forward = await sandbox.forwardPort!(9999)
      const reply = await exchange(forward.port, 'anyone?').catch(() => 'reset')
      expect(['', 'reset']).toContain(reply)
      await forward.close()
      await expect(exchange(forward.port, 'x')).rejects.toMatchObject({ code: 'ECONNREFUSED' })
    })

    it('refuses a bad port with a typed error', async () => {
      for (const port of [0, 70000, 1.5]) {
        await expect(sandbox.forwardPort!(port)).rejects.toMatchObject({ code: 'CONFIG_INVALID' })
      }
    })

    it('offers a unix socket that only the host user can open, removed on close', async () => {
      const forward = await sandbox.forwardPort!(8080, { unixSocket: true })
      const { socketPath } = forward
      const directory = dirname(socketPath)
      try {
        expect(forward).toMatchObject({ sandboxPort: 8080 })
        expect(forward).not.toHaveProperty('port')
        // In the user's well-known parent, where a sweep finds it if this host is killed.
        expect(dirname(directory)).toBe(forwardDirectoriesRoot())
        const socketStat = await stat(socketPath)
        const directoryStat = await stat(directory)
        expect(socketStat.isSocket()).toBe(true)
        expect(socketStat.mode & 0o777).toBe(0o600)
        expect(directoryStat.mode & 0o777).toBe(0o700)
        expect([socketStat.uid, directoryStat.uid]).toEqual([process.getuid!(), process.getuid!()])

        let body = ''
        await until(async () => {
          body = await getOverSocket(socketPath, '/index.html').catch(() => '')
          return body !== ''
        })
        expect(body).toBe('preview from inside\n')

        // The host's own user gets in from another process; another uid does not.
        expect(
          await connectAs({ uid: process.getuid!(), gid: process.getgid!() }, socketPath),
        ).toBe('connected')
        expect(await connectAs(NOBODY, socketPath)).toBe('EACCES')
        // The socket's own mode holds even where its directory lets others pass.
        await chmod(directory, 0o711)
        try {
          expect(await connectAs(NOBODY, socketPath)).toBe('EACCES')
        } finally {
          await chmod(directory, 0o700)
        }
      } finally {
        await forward.close()
      }
      expect(forward.activeConnections).toBe(0)
      await expect(stat(socketPath)).rejects.toMatchObject({ code: 'ENOENT' })
      await expect(stat(directory)).rejects.toMatchObject({ code: 'ENOENT' })
    })

    it('refuses a host address beyond the loopback without the opt-in, and listens nowhere', async () => {
      const hostPort = await freePort()
      const refusal = await sandbox.forwardPort!(8080, { hostAddress: '0.0.0.0', hostPort }).then(
        () => undefined,
        (error: unknown) => error,
      )
      expect(SandboxConfigValidationError.isInstance(refusal)).toBe(true)
      expect(refusal).toMatchObject({
        code: 'CONFIG_INVALID',
        issues: [{ path: 'hostAddress', message: expect.stringContaining('exposeBeyondLoopback') }],
      })
      // 0.0.0.0 would have answered on the loopback too.
      await expect(exchange(hostPort, 'x')).rejects.toMatchObject({ code: 'ECONNREFUSED' })
    })

    it('listens beyond the loopback when the host opts in', async () => {
      const outward = Object.values(networkInterfaces())
        .flat()
        .find((address) => address && address.family === 'IPv4' && !address.internal)
      // The machine needs an interface besides loopback to prove this; none is a failure.
      expect(outward, 'a non-loopback IPv4 address on this machine').toBeDefined()
      const forward = await sandbox.forwardPort!(8080, {
        hostAddress: '0.0.0.0',
        exposeBeyondLoopback: true,
      })
      try {
        expect(forward.host).toBe('0.0.0.0')
        let body = ''
        await until(async () => {
          body = await fetch(`http://${outward!.address}:${forward.port}/index.html`).then(
            (response) => response.text(),
            () => '',
          )
          return body !== ''
        })
        expect(body).toBe('preview from inside\n')
      } finally {
        await forward.close()
      }
    })

    it('closes its forwards when the sandbox goes', async () => {
      const other = await provider.create()
      const forward = await other.forwardPort!(8080)
      const socketForward = await other.forwardPort!(8080, { unixSocket: true })
      await other.destroy()
      await expect(exchange(forward.port, 'x')).rejects.toMatchObject({ code: 'ECONNREFUSED' })
      await until(async () =>
        stat(dirname(socketForward.socketPath)).then(
          () => false,
          (error: NodeJS.ErrnoException) => error.code === 'ENOENT',
        ),
      )
    })
  })
}
