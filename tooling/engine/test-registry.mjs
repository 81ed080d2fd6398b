// Container registries for tests that pull images: Debian's docker-registry
// (distribution 2.8, installed by setup.sh) on a loopback port, which the
// engine allows over plain HTTP (127.0.0.0/8 is an insecure registry by
// default), and a proxy in front of one that counts and inspects what the
// engine asks of it, and can slow its downloads down.
import { execFileSync, spawn } from 'node:child_process'
import { existsSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs'
import { createServer, request } from 'node:http'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import Docker from 'dockerode'

export const REGISTRY_BINARY = '/usr/bin/docker-registry'
const HTPASSWD_BINARY = '/usr/bin/htpasswd'

/**
 * Starts a registry on 127.0.0.1 (a port the kernel picks) with a config
 * file and storage in a fresh temporary directory. With `users`, it asks
 * for HTTP basic auth checked against a bcrypt htpasswd file. Fails loudly
 * when the binaries are missing: tooling/engine/setup.sh installs them.
 */
export async function startLocalRegistry({ users } = {}) {
  for (const binary of users ? [REGISTRY_BINARY, HTPASSWD_BINARY] : [REGISTRY_BINARY]) {
    if (!existsSync(binary)) {
      throw new Error(
        `${binary} is missing; run tooling/engine/setup.sh (it installs docker-registry and apache2-utils)`,
      )
    }
  }
  const dir = mkdtempSync(join(tmpdir(), 'cordon-registry-'))
  const auth = users
    ? `auth:\n  htpasswd:\n    realm: cordon-test\n    path: ${join(dir, 'htpasswd')}\n`
    : ''
  if (users) {
    const lines = Object.entries(users).map(([name, password]) =>
      execFileSync(HTPASSWD_BINARY, ['-B', '-b', '-n', name, password], {
        encoding: 'utf8',
      }).trim(),
    )
    writeFileSync(join(dir, 'htpasswd'), `${lines.join('\n')}\n`)
  }
  writeFileSync(
    join(dir, 'config.yml'),
    `version: 0.1\nlog:\n  level: info\nstorage:\n  filesystem:\n    rootdirectory: ${join(dir, 'data')}\n  delete:\n    enabled: true\nhttp:\n  addr: 127.0.0.1:0\n  secret: cordon-test-${process.pid}\n${auth}`,
  )
  const child = spawn(REGISTRY_BINARY, ['serve', join(dir, 'config.yml')], {
    stdio: ['ignore', 'ignore', 'pipe'],
  })
  let log = ''
  const port = await new Promise((resolve, reject) => {
    const timer = setTimeout(
      () => reject(new Error(`docker-registry did not start within 10 s: ${log}`)),
      10_000,
    )
    child.stderr.on('data', (chunk) => {
      log += chunk.toString()
      const listening = /listening on 127\.0\.0\.1:(\d+)/.exec(log)
      if (listening) {
        clearTimeout(timer)
        resolve(Number(listening[1]))
      }
    })
    child.on('exit', (code) => {
      clearTimeout(timer)
      reject(new Error(`docker-registry exited (${code}): ${log}`))
    })
  })
  child.stderr.resume()
  return {
    port,
    host: `127.0.0.1:${port}`,
    async stop() {
      if (child.exitCode === null) {
        const exited = new Promise((resolve) => child.once('exit', resolve))
        child.kill('SIGTERM')
        await exited
      }
      rmSync(dir, { recursive: true, force: true })
    },
  }
}

/**
 * An HTTP proxy on 127.0.0.1 in front of a registry: an image named with
 * the proxy's port is pulled through it. It records each request (method,
 * path, whether it carried credentials) and, with `slowBlobs`, sends each
 * layer at 16 KiB every 100 ms, so a pull is still downloading seconds
 * later. (A download that is stalled outright would never end on the
 * engine: it stops reading a cancelled download only when more bytes come.)
 */
export async function startRegistryProxy(upstreamPort, { slowBlobs = false } = {}) {
  const requests = []
  const slow = new Set()
  const server = createServer((incoming, outgoing) => {
    requests.push({
      method: incoming.method,
      path: incoming.url,
      authorization: incoming.headers.authorization !== undefined,
    })
    const upstream = request(
      {
        host: '127.0.0.1',
        port: upstreamPort,
        method: incoming.method,
        path: incoming.url,
        headers: incoming.headers,
      },
      (answer) => {
        const blob = /\/blobs\/sha256:/.test(incoming.url ?? '') && incoming.method === 'GET'
        outgoing.writeHead(answer.statusCode ?? 502, answer.headers)
        if (!(slowBlobs && blob && answer.statusCode === 200)) {
          answer.pipe(outgoing)
          return
        }
        slow.add(outgoing)
        const chunks = []
        answer.on('data', (chunk) => chunks.push(chunk))
        answer.on('end', () => {
          let body = Buffer.concat(chunks)
          const timer = setInterval(() => {
            outgoing.write(body.subarray(0, 16_384))
            body = body.subarray(16_384)
            if (body.length === 0) outgoing.end()
          }, 100)
          outgoing.on('close', () => {
            clearInterval(timer)
            slow.delete(outgoing)
          })
        })
      },
    )
    upstream.on('error', () => outgoing.destroy())
    incoming.pipe(upstream)
  })
  await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve))
  const { port } = server.address()
  return {
    port,
    host: `127.0.0.1:${port}`,
    requests,
    /** Layer downloads under way through the proxy right now. */
    slowDownloads: () => slow.size,
    async stop() {
      server.closeAllConnections()
      await new Promise((resolve) => server.close(resolve))
    },
  }
}

/**
 * Pushes the local image `source` to a registry as `target` (a full name,
 * `127.0.0.1:PORT/...`), with `auth` when the registry wants it, then
 * removes the `target` name from the engine, so the engine has to pull it.
 */
export async function pushTestImage(source, target, auth) {
  const docker = new Docker({ socketPath: '/var/run/docker.sock' })
  const colon = target.lastIndexOf(':')
  await docker.getImage(source).tag({ repo: target.slice(0, colon), tag: target.slice(colon + 1) })
  try {
    const stream = await docker
      .getImage(target)
      // The engine wants the header even for a registry that needs no credentials.
      .push({ authconfig: auth ?? {} })
    await new Promise((resolve, reject) =>
      docker.modem.followProgress(stream, (error, messages) => {
        const failed = error ?? messages.find((message) => message.error)
        if (failed) reject(new Error(`push of ${target} failed: ${failed.error ?? failed.message}`))
        else resolve()
      }),
    )
  } finally {
    await docker.getImage(target).remove()
  }
}
