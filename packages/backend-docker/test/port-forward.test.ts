import { connect } from 'node:net'
import type { CordonSandbox, CordonSandboxProvider } from '@cordon/core'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { testProvider } from './test-run.js'

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

async function until(condition: () => Promise<boolean>): Promise<void> {
  for (let attempt = 0; attempt < 50; attempt++) {
    if (await condition()) return
    await new Promise((resolve) => setTimeout(resolve, 100))
  }
  throw new Error('condition never held')
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

    it('closes its forwards when the sandbox goes', async () => {
      const other = await provider.create()
      const forward = await other.forwardPort!(8080)
      await other.destroy()
      await expect(exchange(forward.port, 'x')).rejects.toMatchObject({ code: 'ECONNREFUSED' })
    })
  })
}
