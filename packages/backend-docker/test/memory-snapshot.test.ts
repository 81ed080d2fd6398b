/**
 * Memory snapshots: under gVisor through the engine's checkpoint API (the
 * engine in experimental mode), refused under runc and on an engine that
 * cannot checkpoint. The counters are read from inside the sandboxes.
 */
import {
  copyFileSync,
  existsSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  utimesSync,
} from 'node:fs'
import { join } from 'node:path'
import {
  type CordonSandbox,
  type CordonSandboxProvider,
  SandboxAbortedError,
  SandboxControlRefusedError,
  SandboxOperationError,
  SandboxTransportError,
} from '@cordon/core'
import { BUSYBOX_IMAGE, EPHEMERAL_OUTPUTS, NODE_IMAGE, testRunLabels } from '@cordon/test-support'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import {
  AGENT_MEMORY_ALLOWANCE_MB,
  GVISOR_KERNEL_MEMORY_ALLOWANCE_MB,
} from '../src/container-spec.js'
import { containerdTemporaryDirectories } from '../src/containerd-checkpoint-copies.js'
import { collectGarbage, createDockerSandboxProvider } from '../src/index.js'
import {
  CHECKPOINT_DIRECTORY,
  checkMemorySnapshot,
  explainCheckpointFailure,
  listMemoryCheckpoints,
} from '../src/memory-snapshot.js'
import { memoryCgroupOf } from './memory-cgroup.js'
import { docker } from './test-run.js'

/** The copies of a checkpoint's image that containerd's temporary directories hold. */
function containerdCopiesOf(checkpointImage: string): string[] {
  const bytes = readFileSync(checkpointImage)
  const copies: string[] = []
  for (const directory of containerdTemporaryDirectories())
    for (const name of readdirSync(directory).filter((entry) =>
      entry.startsWith('ctrd-checkpoint'),
    )) {
      const image = join(directory, name, 'checkpoint.img')
      if (existsSync(image) && readFileSync(image).equals(bytes)) copies.push(image)
    }
  return copies
}

const COUNTER_LOOP = [
  '-c',
  'i=0; while :; do i=$((i+1)); echo $i > counter.new; mv counter.new counter; sleep 0.01; done',
]

async function count(sandbox: CordonSandbox): Promise<number> {
  return Number((await sandbox.exec('cat', ['counter'])).stdout.trim())
}

/** Polls until `read` gives more than `than` (a loaded machine runs the loop slowly). */
async function countsPast(sandbox: CordonSandbox, than: number): Promise<number> {
  for (let attempt = 0; attempt < 200; attempt++) {
    const now = await count(sandbox)
    if (now > than) return now
    await new Promise((resolve) => setTimeout(resolve, 100))
  }
  throw new Error(`the counter stayed at ${than}`)
}

async function engineRoot(): Promise<string> {
  return ((await docker.info()) as { DockerRootDir: string }).DockerRootDir
}

function provider(runtime: 'docker' | 'runsc', image = BUSYBOX_IMAGE): CordonSandboxProvider {
  return createDockerSandboxProvider({
    backend: {
      tier: 'container',
      runtime,
      image,
      cpus: 1,
      labels: testRunLabels(),
    },
    layout: EPHEMERAL_OUTPUTS,
    defaultMemoryLimitMb: 96,
    defaultMaxProcesses: 40,
  })
}

describe('memory snapshots under gVisor', () => {
  let gvisor: CordonSandboxProvider
  beforeAll(() => {
    gvisor = provider('runsc')
  })
  afterAll(async () => {
    await gvisor.close()
  })

  it('continues a counting loop in a new sandbox and in the source, each under its own secret, keeps the checkpoint until the snapshot is removed, and leaves no copy of it in containerd', async () => {
    const source = await gvisor.create()
    let snapshotId: string | undefined
    try {
      const loop = await source.start('sh', COUNTER_LOOP)
      const before = await countsPast(source, 0)
      // A command in flight for the host when the checkpoint is taken loses its stream.
      const inFlight = source.exec('sleep', ['30']).then(
        () => 'finished',
        (error: unknown) => error,
      )
      await new Promise((resolve) => setTimeout(resolve, 300))
      const taken = await source.snapshot({ memory: true })
      snapshotId = taken.id
      const lost = await inFlight
      expect(SandboxTransportError.isInstance(lost), String(lost)).toBe(true)
      // A started process goes on, and is reached again by its id.
      const again = await source.attachProcess(loop.id!)
      expect(again.id).toBe(loop.id)
      expect(taken.memory).toBe(true)
      expect(taken.sizeBytes).toBeGreaterThan(0)
      expect(taken.limits).toEqual({ memoryLimitMb: 96, maxProcesses: 40 })
      expect(taken.egress).toEqual({ kind: 'deny-all' })
      expect((await gvisor.snapshots.list()).map((listed) => listed.id)).toContain(taken.id)
      const checkpoint = join(await engineRoot(), CHECKPOINT_DIRECTORY, taken.id)
      expect(existsSync(checkpoint)).toBe(true)
      const [image] = await docker.listImages({
        filters: { label: [`cordon.snapshot=${taken.id}`] },
      })
      expect(image?.Labels?.['cordon.managed']).toBe('1')
      expect(image?.Labels?.['cordon.snapshot.memory']).toBe('1')

      // The source goes on from where it was (same processes, not a new start).
      const sourceAfter = await count(source)
      expect(sourceAfter).toBeGreaterThanOrEqual(before)
      await countsPast(source, sourceAfter)

      const restored = await gvisor.create({ snapshot: taken.id })
      try {
        // containerd unpacks the checkpoint for each start (the source's own
        // and this one) and never removes the copy; the backend does.
        expect(containerdTemporaryDirectories().length).toBeGreaterThan(0)
        expect(containerdCopiesOf(join(checkpoint, 'checkpoint.img'))).toEqual([])
        expect(restored.id).not.toBe(source.id)
        const atRestore = await count(restored)
        expect(atRestore).toBeGreaterThanOrEqual(before)
        await countsPast(restored, atRestore)
        // Hardening and limits as the source had them; the loop is the source's process, its uid the source's.
        expect(restored.enforced.limits.memoryLimitMb).toBe(96)
        expect(restored.enforced.user).toEqual(source.enforced.user)
        const id = await restored.exec('id', ['-u'])
        expect(id.stdout.trim()).toBe(String(source.enforced.user!.uid))
        // What one writes the other does not see.
        await restored.writeFile('mine.txt', 'restored')
        expect((await source.exec('ls', ['mine.txt'])).exitCode).not.toBe(0)
      } finally {
        await restored.destroy()
      }
      await gvisor.snapshots.remove(taken.id)
      snapshotId = undefined
      expect(existsSync(checkpoint)).toBe(false)
      expect((await gvisor.snapshots.list()).map((listed) => listed.id)).not.toContain(taken.id)
      // The source still runs after all of it.
      await countsPast(source, await count(source))
    } finally {
      if (snapshotId) await gvisor.snapshots.remove(snapshotId).catch(() => {})
      await source.destroy()
    }
  })

  it('forks with memory into sandboxes that each go on counting, and leaves no snapshot or checkpoint behind', async () => {
    const source = await gvisor.create()
    try {
      await source.start('sh', COUNTER_LOOP)
      const before = await countsPast(source, 0)
      const root = await engineRoot()
      const checkpointsBefore = listMemoryCheckpoints(root)
      const forks = await source.fork({ count: 2 })
      try {
        expect(new Set([source.id, ...forks.map((fork) => fork.id)]).size).toBe(3)
        for (const fork of forks) {
          const at = await count(fork)
          expect(at).toBeGreaterThanOrEqual(before)
          await countsPast(fork, at)
        }
      } finally {
        await Promise.all(forks.map((fork) => fork.destroy()))
      }
      const left = await docker.listImages({
        filters: { label: [`cordon.sandbox=${source.id}`, 'cordon.role=snapshot'] },
      })
      expect(left).toHaveLength(0)
      expect(listMemoryCheckpoints(root).sort()).toEqual(checkpointsBefore.sort())
      // The source goes on after the fork.
      await countsPast(source, await count(source))
    } finally {
      await source.destroy()
    }
  })

  it('a sandbox holding a TCP socket in use (a Node server) is refused before it is touched, as this runsc cannot save one; fork() copies its files instead; once the server is gone it is checkpointed', async () => {
    const withNode = provider('runsc', NODE_IMAGE)
    const sandbox = await withNode.create({ memoryLimitMb: 256 })
    const snapshots: string[] = []
    try {
      const server = await sandbox.start('node', [
        '-e',
        "require('net').createServer((s) => s.end('hi')).listen(8080, '127.0.0.1', () => require('fs').writeFileSync('/tmp/listening', ''))",
      ])
      for (let attempt = 0; attempt < 100; attempt++) {
        if ((await sandbox.exec('test', ['-e', '/tmp/listening'])).exitCode === 0) break
        await new Promise((resolve) => setTimeout(resolve, 100))
      }
      const refused = await sandbox.snapshot({ memory: true }).then(
        (taken) => {
          snapshots.push(taken.id)
          return taken
        },
        (error: unknown) => error,
      )
      expect(SandboxControlRefusedError.isInstance(refused), String(refused)).toBe(true)
      expect((refused as SandboxControlRefusedError).control).toBe('snapshot.memory')
      expect((refused as SandboxControlRefusedError).backend).toBe('container:runsc')
      expect(String((refused as Error).message)).toMatch(/TCP socket in use.*port 8080 listening/)
      expect((await sandbox.exec('echo', ['still here'])).stdout).toBe('still here\n')
      // A fork that does not ask for memory copies the files of such a sandbox.
      const [fork] = await sandbox.fork({ count: 1 })
      try {
        // Its files (the server's mark among them), not its processes: nothing listens there.
        expect((await fork!.exec('test', ['-e', '/tmp/listening'])).exitCode).toBe(0)
        const dial = await fork!.exec('node', [
          '-e',
          "require('net').connect(8080, '127.0.0.1').on('connect', () => process.exit(0)).on('error', () => process.exit(3))",
        ])
        expect(dial.exitCode).toBe(3)
      } finally {
        await fork!.destroy()
      }
      await server.kill()
      await server.wait().catch(() => {})
      const taken = await sandbox.snapshot({ memory: true })
      snapshots.push(taken.id)
      expect((await sandbox.exec('echo', ['and on'])).stdout).toBe('and on\n')
    } finally {
      await sandbox.destroy()
      for (const id of snapshots) await withNode.snapshots.remove(id)
      await withNode.close()
    }
  })

  it('a sandbox that has run thousands of processes is checkpointed within a small limit, goes on under that limit, and its checkpoint grows with them', async () => {
    const sizeAfter = async (processes: number): Promise<number> => {
      const sandbox = await gvisor.create()
      try {
        const ran = await sandbox.exec(
          'sh',
          ['-c', `i=0; while [ $i -lt ${processes} ]; do /bin/true; i=$((i+1)); done; echo $i`],
          { timeout: 300_000 },
        )
        expect(ran.stdout.trim()).toBe(String(processes))
        // Saving this runsc's kernel state after 2,000 processes peaked at 548
        // MB here, past the container's 304 MiB (96, the agent's allowance and
        // gVisor's kernel's): the save gets headroom, not an OOM kill.
        const taken = await sandbox.snapshot({ memory: true })
        await gvisor.snapshots.remove(taken.id)
        expect((await sandbox.exec('echo', ['still here'])).stdout.trim()).toBe('still here')
        // The source goes on in a cgroup of the engine's making, at its own limit.
        const [listed] = await docker.listContainers({
          filters: { label: [`cordon.sandbox=${sandbox.id}`], status: ['running'] },
        })
        const info = await docker.getContainer(listed!.Id).inspect()
        const limit = memoryCgroupOf(info.State.Pid).limit()
        // The sandbox's 96 MiB and the allowances, as created; not the headroom.
        expect(info.HostConfig.Memory).toBe(
          (96 + AGENT_MEMORY_ALLOWANCE_MB + GVISOR_KERNEL_MEMORY_ALLOWANCE_MB) * 1024 * 1024,
        )
        expect(limit).toBe(info.HostConfig.Memory)
        return taken.sizeBytes
      } finally {
        await sandbox.destroy()
      }
    }
    const none = await sizeAfter(0)
    const many = await sizeAfter(2_000)
    // Measured: about 3 KB more per process while gVisor keeps them (0.23 MB
    // after none, 1.46 MB after 400 in a plain container; the growth slows
    // past a thousand or two, as gVisor's cache of them fills); bench/misses.md has what it costs a restore.
    expect(many - none).toBeGreaterThan(1_000 * 1_500)
  }, 360_000)

  it('gc removes a checkpoint whose snapshot is past its retention or gone, and the copies containerd left of it', async () => {
    const source = await gvisor.create()
    try {
      await source.start('sh', COUNTER_LOOP)
      await countsPast(source, 0)
      const taken = await source.snapshot({ memory: true })
      const checkpoint = join(await engineRoot(), CHECKPOINT_DIRECTORY, taken.id)
      try {
        const young = await collectGarbage({ docker, dryRun: true })
        expect(young.checkpoints).not.toContain(taken.id)
        await new Promise((resolve) => setTimeout(resolve, 50))
        const past = await collectGarbage({ docker, dryRun: true, snapshotRetentionMs: 10 })
        expect(past.checkpoints).toContain(taken.id)
        // What containerd leaves when a host dies before it removes the
        // copy a start made: the checkpoint unpacked into containerd's
        // temporary directory, as containerd names it.
        const [temporary] = containerdTemporaryDirectories()
        const leftover = mkdtempSync(join(temporary!, 'ctrd-checkpoint'))
        copyFileSync(join(checkpoint, 'checkpoint.img'), join(leftover, 'checkpoint.img'))
        const seen = await collectGarbage({ docker, dryRun: true })
        // Every sweep on the engine removes such copies: a provider of another
        // package's tests, starting now, may have taken it first. Still there
        // after this dry run, it was there during it, and must have been seen.
        if (existsSync(leftover)) expect(seen.checkpointCopies).toEqual([leftover])
        // Its record removed by hand (as a person's `docker rmi` would), and an hour old: gc removes it.
        await docker.getImage(`cordon-snapshot:${taken.id}`).remove({ force: true })
        const hourAgo = new Date(Date.now() - 3_600_000)
        utimesSync(checkpoint, hourAgo, hourAgo)
        await collectGarbage({ docker })
        // Named by this run unless another sweep got there first; gone either way.
        expect(existsSync(checkpoint)).toBe(false)
        expect(existsSync(leftover)).toBe(false)
      } finally {
        await gvisor.snapshots.remove(taken.id).catch(() => {})
      }
    } finally {
      await source.destroy()
    }
  })

  it('a memory snapshot aborted while its sandbox is checkpointed rejects with SandboxAbortedError once done, and keeps nothing it made', async () => {
    const quiet = createDockerSandboxProvider({
      backend: {
        tier: 'container',
        runtime: 'runsc',
        image: BUSYBOX_IMAGE,
        cpus: 1,
        labels: testRunLabels(),
        sweepDeadOwners: false,
      },
      layout: EPHEMERAL_OUTPUTS,
      defaultMemoryLimitMb: 96,
      defaultMaxProcesses: 40,
    })
    const source = await quiet.create()
    const rootDir = await engineRoot()
    const made = async () =>
      (await quiet.snapshots.list()).filter((listed) => listed.sourceSandboxId === source.id)
    try {
      // Aborted once the engine has the checkpoint under way: the container stops for it.
      const controller = new AbortController()
      const events = (await docker.getEvents({
        filters: {
          type: ['container'],
          event: ['checkpoint', 'die'],
          label: [`cordon.sandbox=${source.id}`],
        },
      })) as NodeJS.ReadableStream & { destroy(): void }
      events.once('data', () => controller.abort())
      const checkpoints = new Set(readdirSync(join(rootDir, CHECKPOINT_DIRECTORY)))
      const error = await source.snapshot({ memory: true, signal: controller.signal }).then(
        () => undefined,
        (caught: unknown) => caught,
      )
      events.destroy()
      expect(controller.signal.aborted).toBe(true)
      expect(SandboxAbortedError.isInstance(error), String(error)).toBe(true)
      expect(await made()).toEqual([])
      const left = readdirSync(join(rootDir, CHECKPOINT_DIRECTORY)).filter(
        (name) => !checkpoints.has(name),
      )
      expect(left).toEqual([])
      // The sandbox itself goes on.
      expect((await source.exec('true')).exitCode).toBe(0)
    } finally {
      for (const left of await made()) await quiet.snapshots.remove(left.id)
      await source.destroy()
      await quiet.close()
    }
  })
})

describe('memory snapshots refused', () => {
  let runc: CordonSandboxProvider
  beforeAll(() => {
    runc = provider('docker')
  })
  afterAll(async () => {
    await runc.close()
  })

  it('under runc: refused naming snapshot.memory and the backend, and the sandbox goes on', async () => {
    const sandbox = await runc.create()
    try {
      const refused = await sandbox.snapshot({ memory: true }).catch((error: unknown) => error)
      expect(SandboxControlRefusedError.isInstance(refused), String(refused)).toBe(true)
      expect((refused as SandboxControlRefusedError).control).toBe('snapshot.memory')
      expect((refused as SandboxControlRefusedError).backend).toBe('container:docker')
      expect((await sandbox.exec('echo', ['still here'])).stdout).toBe('still here\n')
    } finally {
      await sandbox.destroy()
    }
  })

  it('on an engine whose experimental mode is off: refused saying so, before the sandbox is touched', async () => {
    const engine = {
      version: async () => ({ Version: '20.10.24', Experimental: false }),
      info: async () => ({ DockerRootDir: '/var/lib/docker' }),
    }
    const refused = await checkMemorySnapshot(engine as never, {
      backend: 'container:gvisor',
      runtime: 'runsc',
      detached: false,
      layout: {
        outputs: { containerPath: '/mnt/user-data/outputs', source: { type: 'ephemeral' } },
      } as never,
      engineIsLocal: true,
    }).catch((error: unknown) => error)
    expect(SandboxControlRefusedError.isInstance(refused), String(refused)).toBe(true)
    expect((refused as SandboxControlRefusedError).control).toBe('snapshot.memory')
    expect((refused as SandboxControlRefusedError).backend).toBe('container:gvisor')
    expect(String((refused as Error).message)).toMatch(/experimental mode is off/)
  })

  it("a save that ends gVisor's kernel is a typed error that says so (the engine's answer, as seen when a save was OOM-killed)", () => {
    const engineAnswer = new Error(
      '(HTTP code 500) server error - Cannot checkpoint container 8ac6fede4e14: /var/lib/docker/runtimes/runsc-host-sockets did not terminate successfully: exit status 128: checkpoint failed: checkpointing container "8ac6fede4e14": urpc method "containerManager.Checkpoint" failed: EOF path= /var/run/docker/containerd/daemon/io.containerd.runtime.v2.task/moby/8ac6fede4e14/criu-dump.log: unknown',
    )
    const explained = explainCheckpointFailure(engineAnswer)
    expect(SandboxOperationError.isInstance(explained), String(explained)).toBe(true)
    expect((explained as Error).message).toMatch(/kernel ended while it saved the sandbox/)
    expect((explained as Error).cause).toBe(engineAnswer)
    const other = new Error('something else')
    expect(explainCheckpointFailure(other)).toBe(other)
  })
})
