import { createHash, randomBytes } from 'node:crypto'
import { once } from 'node:events'
import { existsSync } from 'node:fs'
import { chmod, mkdir, mkdtemp, rm, symlink } from 'node:fs/promises'
import { connect, createServer } from 'node:net'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import type { Duplex } from 'node:stream'
import { RetryableDialError } from '@cordon/agent/sandbox'
import { BUSYBOX_IMAGE, testRunLabels } from '@cordon/test-support'
import { afterEach, describe, expect, it, vi } from 'vitest'
import {
  DIRECT_SOCKET_DIR,
  DIRECT_SOCKET_PATH,
  DirectRoute,
  DirectSocket,
  isSocketDirectory,
} from '../src/direct-socket.js'
import { watchReadiness } from './readiness-watch.js'
import { docker, testProvider } from './test-run.js'

/**
 * Issue 15: file and command streams skip the engine's attach where the host
 * can reach the container's filesystem (a local engine, runc, a root host): the agent
 * listens on a unix socket in a root-only tmpfs, reached through
 * `/proc/<pid>/root`. The sandbox's user cannot reach it; gVisor, where it
 * cannot work, keeps everything on the attach.
 */

afterEach(() => {
  vi.restoreAllMocks()
})

/** Resolves once `DirectSocket.find` has settled for the sandbox just created. */
function watchOpen(): { opened: Promise<DirectSocket | undefined> } {
  const original = DirectSocket.find.bind(DirectSocket)
  let settle!: (value: DirectSocket | undefined) => void
  const opened = new Promise<DirectSocket | undefined>((resolve) => {
    settle = resolve
  })
  vi.spyOn(DirectSocket, 'find').mockImplementation(async (engine, containerId) => {
    const result = await original(engine, containerId)
    settle(result)
    return result
  })
  return { opened }
}

describe('the direct socket (Docker)', () => {
  it("carries the agent's first answer, then file and command streams under runc, byte-exact", async () => {
    const { opened } = watchOpen()
    const dials = vi.spyOn(DirectSocket.prototype, 'connect')
    const provider = testProvider()
    try {
      const sandbox = await provider.create()
      expect(await opened).toBeInstanceOf(DirectSocket)
      // The readiness connection (kept for the first command) came through the socket.
      const connected = await Promise.allSettled(dials.mock.results.map((result) => result.value))
      expect(connected.some((result) => result.status === 'fulfilled')).toBe(true)
      const before = dials.mock.calls.length
      const content = randomBytes(8 * 1024 * 1024 + 17)
      await sandbox.writeFile('payload.bin', content)
      expect((await sandbox.readFile('payload.bin')).equals(content)).toBe(true)
      expect(dials.mock.calls.length).toBeGreaterThan(before)
      const afterFiles = dials.mock.calls.length
      const viaCommand = await sandbox.exec('sha256sum', ['payload.bin'])
      expect(viaCommand.stdout.split(' ')[0]).toBe(
        createHash('sha256').update(content).digest('hex'),
      )
      // The command's stream (or the spare it took, replaced at once) came over the socket.
      expect(dials.mock.calls.length).toBeGreaterThan(afterFiles)
    } finally {
      await provider.close()
    }
  })

  it('readiness makes one handshake, over the socket: the attach is tried only once the socket has been silent for 250 ms', async () => {
    const { opened } = watchOpen()
    const { firstDial, viaAttach, adopted } = watchReadiness()
    const provider = testProvider()
    try {
      const sandbox = await provider.create()
      const socket = await opened
      expect(socket).toBeInstanceOf(DirectSocket)
      expect(adopted).toHaveBeenCalledTimes(1)
      // An agent that booted slower than the fallback (a loaded machine) gets both tried; never sooner.
      for (const at of viaAttach)
        expect(at - firstDial.get(socket as DirectSocket)!).toBeGreaterThanOrEqual(200)
      expect((await sandbox.exec('echo', ['ready'])).stdout).toBe('ready\n')
    } finally {
      await provider.close()
    }
  })

  it("cannot be reached, listed or found by the sandbox's user (runc)", async () => {
    const { opened } = watchOpen()
    const provider = testProvider()
    try {
      const sandbox = await provider.create()
      expect(await opened).toBeInstanceOf(DirectSocket)
      const probe = await sandbox.exec('sh', [
        '-c',
        [
          `ls ${DIRECT_SOCKET_DIR} 2>&1 && echo LISTED`,
          `cat ${DIRECT_SOCKET_PATH} 2>&1 && echo OPENED`,
          `test -e ${DIRECT_SOCKET_PATH} && echo EXISTS`,
          // The agent's open descriptors are not the user's to see.
          'for pid in $(ls /proc | grep -E "^[0-9]+$"); do ls -l /proc/$pid/fd 2>/dev/null; done | grep -c files.sock',
        ].join('; '),
      ])
      expect(probe.stdout).toContain('Permission denied')
      expect(probe.stdout).not.toMatch(/LISTED|OPENED|EXISTS/)
      expect(probe.stdout.trim().split('\n').at(-1)).toBe('0')
    } finally {
      await provider.close()
    }
  })

  it('asks every connection to authenticate: a stranger on the socket gets nothing', async () => {
    const { opened } = watchOpen()
    const provider = testProvider()
    try {
      const sandbox = await provider.create()
      expect(await opened).toBeInstanceOf(DirectSocket)
      const container = await docker.getContainer(`cordon-${sandbox.id}`).inspect()
      const socket = connect({ path: `/proc/${container.State.Pid}/root${DIRECT_SOCKET_PATH}` })
      const answer = await new Promise<string>((resolve) => {
        let received = ''
        socket.on('data', (chunk: Buffer) => {
          received += chunk.toString('latin1')
          // Anything but a proof: the agent refuses and hangs up.
          socket.write(Buffer.from([0, 0, 0, 3, 1, 123, 125]))
        })
        socket.on('close', () => resolve(received))
        socket.on('error', () => resolve(received))
      })
      expect(answer).toContain('hello')
      expect(answer).not.toContain('auth-ok')
    } finally {
      await provider.close()
    }
  })

  it('is not dialled under gVisor, whose files stay on the attach and work', async () => {
    const open = vi.spyOn(DirectSocket, 'find')
    const provider = testProvider({ runtime: 'runsc' })
    try {
      const sandbox = await provider.create()
      const content = randomBytes(1024 * 1024)
      await sandbox.writeFile('payload.bin', content)
      expect((await sandbox.readFile('payload.bin')).equals(content)).toBe(true)
      expect(open).not.toHaveBeenCalled()
      // The agent still listens (a memory snapshot's restore is reached through a relay on it,
      // see memory-snapshot.ts), in a directory the sandbox user cannot list, and inside
      // gVisor's own kernel: the host cannot reach it through the container's root.
      const probe = await sandbox.exec('sh', ['-c', `test -d ${DIRECT_SOCKET_DIR} && echo PRESENT`])
      expect(probe.stdout).toContain('PRESENT')
      const container = await docker.getContainer(`cordon-${sandbox.id}`).inspect()
      expect(existsSync(`/proc/${container.State.Pid}/root${DIRECT_SOCKET_PATH}`)).toBe(false)
    } finally {
      await provider.close()
    }
  })

  it('once the socket has worked, a failed dial is an error, not a quiet switch to the attach', async () => {
    const provider = testProvider()
    try {
      const sandbox = await provider.create()
      const { Id } = await docker.getContainer(`cordon-${sandbox.id}`).inspect()
      const route = new DirectRoute(DirectSocket.find(docker, Id))
      const first = await route.firstConnection(AbortSignal.timeout(5_000))
      expect(first).toBeDefined()
      first!.destroy()
      vi.spyOn(DirectSocket.prototype, 'connect').mockRejectedValueOnce(
        new RetryableDialError('the direct socket refused: ECONNREFUSED'),
      )
      const attach = { stream: 'attach' } as unknown as Duplex
      await expect(route.dial(AbortSignal.timeout(1_000), () => attach)).rejects.toThrow(
        'the direct socket refused',
      )
      route.close()
    } finally {
      await provider.close()
    }
  })

  it('where no socket answers, streams go on the attach, and the socket is given up for good', async () => {
    const provider = testProvider({ runtime: 'runsc' })
    try {
      const sandbox = await provider.create()
      // A gVisor container: its pid is the sandbox's, and no socket directory is behind its root.
      const { Id } = await docker.getContainer(`cordon-${sandbox.id}`).inspect()
      expect(await DirectSocket.find(docker, Id)).toBeUndefined()
      // An id the engine does not know: nothing is found.
      expect(await DirectSocket.find(docker, 'f'.repeat(64))).toBeUndefined()
    } finally {
      await provider.close()
    }
    // A socket found but refusing (its listener never opened): tried once, then the attach for good.
    const refused = Object.assign(new Error('connect ECONNREFUSED'), { code: 'ECONNREFUSED' })
    const connect = vi.fn(async () => {
      throw new RetryableDialError('the direct socket refused', { cause: refused })
    })
    const route = new DirectRoute(
      Promise.resolve({ connect, close: () => {} } as unknown as DirectSocket),
    )
    expect(await route.firstConnection(AbortSignal.timeout(300))).toBeUndefined()
    route.enable()
    connect.mockClear()
    const attach = { stream: 'attach' } as unknown as Duplex
    expect(await route.dial(AbortSignal.timeout(1_000), () => attach)).toBe(attach)
    expect(await route.dial(AbortSignal.timeout(1_000), () => attach)).toBe(attach)
    expect(connect).toHaveBeenCalledTimes(1)
    route.close()
  })

  for (const [shape, target] of [
    ['an absolute link', (planted: string) => planted],
    [
      'a relative link that climbs out of the root',
      (planted: string) => `${'../'.repeat(12)}${planted.slice(1)}`,
    ],
  ] as const) {
    it(`an image whose /run is ${shape} cannot point the host's dial at a host path`, async () => {
      // Where the link would take the host's kernel: a socket of this test's, listening on the host.
      const planted = await mkdtemp(join(tmpdir(), 'cordon-planted-'))
      await mkdir(join(planted, 'cordon-agent'))
      const dialled: string[] = []
      const impostor = createServer((socket) => {
        dialled.push('connection')
        socket.destroy()
      })
      impostor.listen(join(planted, DIRECT_SOCKET_PATH.slice('/run/'.length)))
      await once(impostor, 'listening')
      const image = `cordon-test/run-link:${randomBytes(4).toString('hex')}`
      const builder = await docker.createContainer({
        Image: BUSYBOX_IMAGE,
        User: '0:0',
        Cmd: ['sh', '-c', `rm -rf /run && ln -s '${target(planted)}' /run`],
        Labels: testRunLabels(),
      })
      const { opened } = watchOpen()
      const provider = testProvider({ image })
      try {
        await builder.start()
        expect((await builder.wait()).StatusCode).toBe(0)
        const [repo, tag] = image.split(':')
        await builder.commit({ repo, tag })
        const sandbox = await provider.create()
        expect((await sandbox.exec('readlink', ['/run'])).stdout.trim()).toBe(target(planted))
        // The sandbox works, over the attach: the host never dialled the planted socket.
        expect(await opened).toBeUndefined()
        await sandbox.writeFile('through-attach.txt', 'ok')
        expect((await sandbox.readFile('through-attach.txt')).toString()).toBe('ok')
        expect((await sandbox.exec('echo', ['alive'])).stdout).toBe('alive\n')
        expect(dialled).toEqual([])
      } finally {
        await provider.close()
        await builder.remove({ force: true })
        await docker
          .getImage(image)
          .remove({ force: true })
          .catch(() => {})
        impostor.close()
        await rm(planted, { recursive: true, force: true })
      }
    })
  }

  it('the socket directory check accepts only real directories ending in a root-owned 0700 one', async () => {
    const root = await mkdtemp(join(tmpdir(), 'cordon-socket-dir-'))
    try {
      await mkdir(join(root, 'run/cordon-agent'), { recursive: true, mode: 0o700 })
      await chmod(join(root, 'run/cordon-agent'), 0o700)
      expect(isSocketDirectory(root)).toBe(true)
      await chmod(join(root, 'run/cordon-agent'), 0o755)
      expect(isSocketDirectory(root)).toBe(false)
      await rm(join(root, 'run'), { recursive: true })
      await mkdir(join(root, 'elsewhere/cordon-agent'), { recursive: true, mode: 0o700 })
      await chmod(join(root, 'elsewhere/cordon-agent'), 0o700)
      await symlink('elsewhere', join(root, 'run'))
      expect(isSocketDirectory(root)).toBe(false)
    } finally {
      await rm(root, { recursive: true, force: true })
    }
  })
})
