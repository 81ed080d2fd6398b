import { createHash, randomBytes } from 'node:crypto'
import { connect } from 'node:net'
import type { Duplex } from 'node:stream'
import { AgentClient, RetryableDialError } from '@cordon/agent/sandbox'
import { afterEach, describe, expect, it, vi } from 'vitest'
import {
  DIRECT_SOCKET_DIR,
  DIRECT_SOCKET_PATH,
  DirectRoute,
  DirectSocket,
} from '../src/direct-socket.js'
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
    const original = DirectSocket.prototype.connect
    let firstDial: number | undefined
    vi.spyOn(DirectSocket.prototype, 'connect').mockImplementation(function (
      this: DirectSocket,
      signal,
    ) {
      firstDial ??= performance.now()
      return original.call(this, signal)
    })
    const viaAttach: number[] = []
    vi.spyOn(AgentClient.prototype, 'openSpareConnection').mockImplementation(async () => {
      viaAttach.push(performance.now())
      throw new Error('readiness went to the attach')
    })
    const adopted = vi.spyOn(AgentClient.prototype, 'adoptSpareConnection')
    const provider = testProvider()
    try {
      const sandbox = await provider.create()
      expect(await opened).toBeInstanceOf(DirectSocket)
      expect(adopted).toHaveBeenCalledTimes(1)
      // An agent that booted slower than the fallback (a loaded machine) gets both tried; never sooner.
      for (const at of viaAttach) expect(at - firstDial!).toBeGreaterThanOrEqual(200)
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

  it('is not used under gVisor, whose files stay on the attach and work', async () => {
    const open = vi.spyOn(DirectSocket, 'find')
    const provider = testProvider({ runtime: 'runsc' })
    try {
      const sandbox = await provider.create()
      const content = randomBytes(1024 * 1024)
      await sandbox.writeFile('payload.bin', content)
      expect((await sandbox.readFile('payload.bin')).equals(content)).toBe(true)
      expect(open).not.toHaveBeenCalled()
      const probe = await sandbox.exec('sh', ['-c', `test -e ${DIRECT_SOCKET_DIR} || echo ABSENT`])
      expect(probe.stdout).toContain('ABSENT')
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
      // A gVisor container: its pid is the sandbox's, and no socket is behind its root.
      const { Id } = await docker.getContainer(`cordon-${sandbox.id}`).inspect()
      const route = new DirectRoute(DirectSocket.find(docker, Id))
      expect(await route.firstConnection(AbortSignal.timeout(300))).toBeUndefined()
      route.enable()
      const dials = vi.spyOn(DirectSocket.prototype, 'connect')
      const attach = { stream: 'attach' } as unknown as Duplex
      expect(await route.dial(AbortSignal.timeout(1_000), () => attach)).toBe(attach)
      expect(await route.dial(AbortSignal.timeout(1_000), () => attach)).toBe(attach)
      // Tried once; after that failure the attach without trying again.
      expect(dials).toHaveBeenCalledTimes(1)
      route.close()
      // An id the engine does not know: nothing is found.
      expect(await DirectSocket.find(docker, 'f'.repeat(64))).toBeUndefined()
    } finally {
      await provider.close()
    }
  })
})
