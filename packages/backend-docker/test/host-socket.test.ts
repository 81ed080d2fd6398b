import { createHash, randomBytes } from 'node:crypto'
import { chmod, lstat, mkdtemp, readdir, rm, stat } from 'node:fs/promises'
import { createServer } from 'node:net'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { LABEL } from '@cordon/core/backend'
import { containerTestBackend, EPHEMERAL_OUTPUTS, NODE_IMAGE } from '@cordon/test-support'
import Docker from 'dockerode'
import { afterEach, describe, expect, it, vi } from 'vitest'
import {
  DirectSocket,
  HOST_SOCKET_DIR,
  HOST_SOCKET_PATH,
  HOST_SOCKETS_RUNTIME,
} from '../src/direct-socket.js'
import { createDockerSandboxProvider } from '../src/index.js'
import { watchReadiness } from './readiness-watch.js'
import { docker, testProvider } from './test-run.js'

/**
 * Issue 30: under gVisor the host cannot see the agent's direct socket (it
 * lives in gVisor's own kernel), so the agent also listens in a directory the
 * host backs, and gVisor, registered with `--host-uds=create`, makes that a
 * host socket: command and file streams skip the engine's attach there too.
 */

afterEach(() => {
  vi.restoreAllMocks()
})

/** Resolves with what `DirectSocket.findOnHost` found for each container, as it settles. */
function watchFindOnHost(): Map<string, Promise<DirectSocket | undefined>> {
  const original = DirectSocket.findOnHost.bind(DirectSocket)
  const found = new Map<string, Promise<DirectSocket | undefined>>()
  vi.spyOn(DirectSocket, 'findOnHost').mockImplementation((engine, containerId) => {
    const result = original(engine, containerId)
    found.set(containerId, result)
    return result
  })
  return found
}

async function hostSocketSource(containerName: string): Promise<string> {
  const info = await docker.getContainer(containerName).inspect()
  const mount = info.Mounts.find((entry) => entry.Destination === HOST_SOCKET_DIR)
  expect(mount?.Type).toBe('volume')
  return mount!.Source
}

describe('the host-backed socket (gVisor)', () => {
  it('carries file and command streams past the engine, byte-exact; its directory is a root-only tmpfs on the host', async () => {
    const found = watchFindOnHost()
    const dials = vi.spyOn(DirectSocket.prototype, 'connect')
    const find = vi.spyOn(DirectSocket, 'find')
    const provider = testProvider({ runtime: 'runsc' })
    try {
      const sandbox = await provider.create()
      const container = await docker.getContainer(`cordon-${sandbox.id}`).inspect()
      expect(await found.get(container.Id)).toBeInstanceOf(DirectSocket)
      // The container's root is not dialled under gVisor: nothing of the sandbox is there.
      expect(find).not.toHaveBeenCalled()
      const source = await hostSocketSource(`cordon-${sandbox.id}`)
      const directory = await stat(source)
      expect(directory.uid).toBe(0)
      expect(directory.mode & 0o7777).toBe(0o700)
      const socket = await lstat(join(source, 'files.sock'))
      expect(socket.isSocket()).toBe(true)
      expect(socket.uid).toBe(0)
      const before = dials.mock.calls.length
      const content = randomBytes(8 * 1024 * 1024 + 17)
      await sandbox.writeFile('payload.bin', content)
      expect((await sandbox.readFile('payload.bin')).equals(content)).toBe(true)
      const viaCommand = await sandbox.exec('sha256sum', ['payload.bin'])
      expect(viaCommand.stdout.split(' ')[0]).toBe(
        createHash('sha256').update(content).digest('hex'),
      )
      // Each came over the socket (a stream, or the spare it took, replaced at once).
      const settled = await Promise.allSettled(dials.mock.results.slice(before).map((r) => r.value))
      expect(settled.length).toBeGreaterThan(0)
      expect(settled.every((result) => result.status === 'fulfilled')).toBe(true)
    } finally {
      await provider.close()
    }
  })

  it('readiness makes one handshake, over the host socket: the attach is tried only once it has been silent for a second', async () => {
    // Under gVisor the agent's listener is up 230-340 ms after the engine's
    // start call on a quiet machine; at runc's 250 ms most creates tried
    // the attach as well, a second handshake on the agent's one thread.
    const found = watchFindOnHost()
    const { firstDial, viaAttach, adopted } = watchReadiness()
    const provider = testProvider({ runtime: 'runsc' })
    try {
      for (let round = 0; round < 3; round += 1) {
        const sandbox = await provider.create()
        const container = await docker.getContainer(`cordon-${sandbox.id}`).inspect()
        const socket = await found.get(container.Id)
        expect(socket).toBeInstanceOf(DirectSocket)
        // An agent that booted slower than that (a loaded machine) gets both tried; never sooner.
        for (const at of viaAttach.splice(0))
          expect(at - firstDial.get(socket!)!).toBeGreaterThanOrEqual(950)
        expect((await sandbox.exec('echo', ['ready'])).stdout).toBe('ready\n')
        await sandbox.destroy()
      }
      expect(adopted).toHaveBeenCalledTimes(3)
    } finally {
      await provider.close()
    }
  })

  it("cannot be reached, listed or found by the sandbox's user", async () => {
    const found = watchFindOnHost()
    const provider = testProvider({ runtime: 'runsc' })
    try {
      const sandbox = await provider.create()
      const container = await docker.getContainer(`cordon-${sandbox.id}`).inspect()
      expect(await found.get(container.Id)).toBeInstanceOf(DirectSocket)
      const probe = await sandbox.exec('sh', [
        '-c',
        [
          `ls ${HOST_SOCKET_DIR} 2>&1 && echo LISTED`,
          `cat ${HOST_SOCKET_PATH} 2>&1 && echo OPENED`,
          `test -e ${HOST_SOCKET_PATH} && echo EXISTS`,
        ].join('; '),
      ])
      expect(probe.stdout).toContain('Permission denied')
      expect(probe.stdout).not.toMatch(/LISTED|OPENED|EXISTS/)
    } finally {
      await provider.close()
    }
  })

  it('gVisor may create host sockets there, not connect to them: a host socket in a mounted directory refuses the sandbox', async () => {
    const root = await mkdtemp(join(tmpdir(), 'cordon-host-uds-'))
    await chmod(root, 0o755)
    const accepted: unknown[] = []
    const server = createServer((socket) => {
      accepted.push(socket)
      socket.end('host secrets')
    })
    await new Promise<void>((resolve) => server.listen(join(root, 'host.sock'), resolve))
    await chmod(join(root, 'host.sock'), 0o777)
    const provider = testProvider(
      { runtime: 'runsc', image: NODE_IMAGE },
      {
        layout: {
          outputs: { source: { type: 'ephemeral' } },
          uploads: { source: { type: 'hostDir', hostPath: root } },
        },
      },
    )
    try {
      const sandbox = await provider.create({ memoryLimitMb: 256 })
      const info = await docker.getContainer(`cordon-${sandbox.id}`).inspect()
      expect(info.HostConfig.Runtime).toBe(HOST_SOCKETS_RUNTIME)
      const tried = await sandbox.exec('node', [
        '-e',
        "require('net').connect('/mnt/user-data/uploads/host.sock').on('connect', () => console.log('CONNECTED')).on('error', (e) => console.log('REFUSED', e.code))",
      ])
      expect(tried.stdout).toMatch(/^REFUSED /)
      expect(accepted).toHaveLength(0)
    } finally {
      await provider.close()
      server.close()
      await rm(root, { recursive: true, force: true })
    }
  })

  it('a sandbox with a writable host directory runs under plain runsc: a socket its user binds there stays inside gVisor, where the seal sees it, and streams take the attach', async () => {
    const root = await mkdtemp(join(tmpdir(), 'cordon-host-uds-'))
    await chmod(root, 0o1777)
    const findOnHost = vi.spyOn(DirectSocket, 'findOnHost')
    const provider = testProvider(
      { runtime: 'runsc', image: NODE_IMAGE },
      { layout: { outputs: { source: { type: 'hostDir', hostPath: root } } } },
    )
    try {
      const sandbox = await provider.create({ memoryLimitMb: 256 })
      const info = await docker.getContainer(`cordon-${sandbox.id}`).inspect()
      expect(info.HostConfig.Runtime).toBe('runsc')
      expect(info.Mounts.some((mount) => mount.Destination === HOST_SOCKET_DIR)).toBe(false)
      const bound = await sandbox.start('node', [
        '-e',
        "require('net').createServer().listen('made.sock', () => require('fs').writeFileSync('/tmp/listening', ''))",
      ])
      for (let attempt = 0; attempt < 100; attempt++) {
        if ((await sandbox.exec('test', ['-e', '/tmp/listening'])).exitCode === 0) break
        await new Promise((resolve) => setTimeout(resolve, 100))
      }
      expect((await sandbox.exec('test', ['-S', 'made.sock'])).exitCode).toBe(0)
      expect(await readdir(root)).not.toContain('made.sock')
      const content = randomBytes(1024 * 1024)
      await sandbox.writeFile('payload.bin', content)
      expect((await sandbox.readFile('payload.bin')).equals(content)).toBe(true)
      expect(findOnHost).not.toHaveBeenCalled()
      await bound.kill()
    } finally {
      await provider.close()
      await rm(root, { recursive: true, force: true })
    }
  })

  it('a memory snapshot closes it for the checkpoint (gVisor cannot save a host socket) and the sandbox goes on over it in its new container, resumed there without an engine exec', async () => {
    const found = watchFindOnHost()
    const provider = testProvider({ runtime: 'runsc' })
    // The other way to resume is an exec of `--pipe` (agent-socket-pipe.ts).
    const execs = vi.spyOn(Docker.Container.prototype, 'exec')
    const pipeExecs = () =>
      execs.mock.calls.filter(([options]) =>
        ((options as { Cmd?: string[] }).Cmd ?? []).includes('--pipe'),
      )
    try {
      const sandbox = await provider.create()
      const first = (await docker.getContainer(`cordon-${sandbox.id}`).inspect()).Id
      expect(await found.get(first)).toBeInstanceOf(DirectSocket)
      await sandbox.writeFile('kept.txt', 'from before')
      const snapshot = await sandbox.snapshot({ memory: true })
      try {
        const next = (await docker.getContainer(`cordon-${sandbox.id}`).inspect()).Id
        expect(next).not.toBe(first)
        expect(await found.get(next)).toBeInstanceOf(DirectSocket)
        const dials = vi.spyOn(DirectSocket.prototype, 'connect')
        expect((await sandbox.readFile('kept.txt')).toString()).toBe('from before')
        expect((await sandbox.exec('echo', ['on'])).stdout).toBe('on\n')
        const settled = await Promise.allSettled(dials.mock.results.map((r) => r.value))
        expect(settled.some((result) => result.status === 'fulfilled')).toBe(true)
        // A sandbox started from the snapshot gets a socket of its own too.
        const restored = await provider.create({ snapshot: snapshot.id })
        const restoredId = (await docker.getContainer(`cordon-${restored.id}`).inspect()).Id
        expect(await found.get(restoredId)).toBeInstanceOf(DirectSocket)
        expect((await restored.readFile('kept.txt')).toString()).toBe('from before')
        await restored.destroy()
        expect(pipeExecs()).toHaveLength(0)
      } finally {
        await provider.snapshots.remove(snapshot.id).catch(() => {})
      }
    } finally {
      await provider.close()
    }
  })

  it('a host connecting to a detached sandbox dials it there, with no relay started through the engine', async () => {
    const found = watchFindOnHost()
    const creator = testProvider({ runtime: 'runsc' })
    const other = createDockerSandboxProvider({
      backend: containerTestBackend({ runtime: 'runsc' }),
      layout: EPHEMERAL_OUTPUTS,
      credentialStore: false,
    })
    try {
      const sandbox = await creator.create({ detached: true, lifetimeMs: 120_000 })
      await sandbox.writeFile('note.txt', 'kept')
      const execs = vi.spyOn(Docker.Container.prototype, 'exec')
      const dials = vi.spyOn(DirectSocket.prototype, 'connect')
      const reached = await other.connect(sandbox.id, { credential: sandbox.credential! })
      const id = (await docker.getContainer(`cordon-${sandbox.id}`).inspect()).Id
      expect(await found.get(id)).toBeInstanceOf(DirectSocket)
      expect((await reached.readFile('note.txt')).toString()).toBe('kept')
      expect((await reached.exec('echo', ['reached'])).stdout).toBe('reached\n')
      const settled = await Promise.allSettled(dials.mock.results.map((r) => r.value))
      expect(settled.length).toBeGreaterThan(0)
      expect(settled.every((result) => result.status === 'fulfilled')).toBe(true)
      // No engine exec: the relay (`agent --relay`) was not needed.
      expect(execs).not.toHaveBeenCalled()
      await reached.disconnect()
      await sandbox.destroy()
    } finally {
      await Promise.all([creator.close(), other.close()])
    }
  })

  it('its volume is labelled as cordon’s and goes with the sandbox', async () => {
    const provider = testProvider({ runtime: 'runsc' })
    try {
      const sandbox = await provider.create()
      const source = await hostSocketSource(`cordon-${sandbox.id}`)
      const volumes = await docker.listVolumes({
        filters: { label: [`${LABEL.sandbox}=${sandbox.id}`, `${LABEL.role}=agent-socket`] },
      })
      expect(volumes.Volumes).toHaveLength(1)
      expect(volumes.Volumes[0]!.Labels[LABEL.managed]).toBe('1')
      expect(source).toContain(volumes.Volumes[0]!.Name)
      await sandbox.destroy()
      const after = await docker.listVolumes({
        filters: { label: [`${LABEL.sandbox}=${sandbox.id}`] },
      })
      expect(after.Volumes ?? []).toHaveLength(0)
    } finally {
      await provider.close()
    }
  })
})
