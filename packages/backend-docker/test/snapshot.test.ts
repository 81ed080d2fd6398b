import {
  type CordonSandboxProvider,
  SandboxAbortedError,
  type SandboxEvent,
  SandboxSnapshotNotFoundError,
} from '@cordon/core'
import { LABEL } from '@cordon/core/backend'
import { BUSYBOX_IMAGE, testRunLabels } from '@cordon/test-support'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { SNAPSHOT_DIRECTORY } from '../src/filesystem-snapshot.js'
import {
  collectGarbage,
  createDockerSandboxProvider,
  DEFAULT_SNAPSHOT_RETENTION_MS,
} from '../src/index.js'
import { engineExec } from './engine-exec.js'
import { engineFront } from './engine-front.js'
import { describeAlongside } from './run-alongside.js'
import { docker } from './test-run.js'

const SCRATCH = '/mnt/user-data/scratch'

async function snapshotImages(id: string) {
  return docker.listImages({ filters: { label: [`cordon.snapshot=${id}`] } })
}

async function helperContainers(id: string) {
  return docker.listContainers({ all: true, filters: { name: [`cordon-snapshot-${id}`] } })
}

for (const runtime of ['docker', 'runsc'] as const) {
  describeAlongside(`filesystem snapshots and fork (${runtime})`, () => {
    let provider: CordonSandboxProvider
    const events: SandboxEvent[] = []
    beforeAll(() => {
      provider = createDockerSandboxProvider({
        backend: {
          tier: 'container',
          runtime,
          image: BUSYBOX_IMAGE,
          cpus: 1,
          labels: testRunLabels(),
        },
        layout: {
          outputs: { source: { type: 'ephemeral' } },
          scratch: { source: { type: 'ephemeral', sizeMb: 16 } },
        },
        defaultMemoryLimitMb: 96,
        defaultMaxProcesses: 40,
        brokeredCredentials: [
          {
            host: 'api.example.test',
            header: 'authorization',
            value: 'Bearer brokered-secret-value-7f3a',
          },
        ],
        onEvent: (event) => events.push(event),
      })
    })
    afterAll(async () => {
      await provider.close()
    })

    it('captures the workspace, /tmp and scratch into a labelled image and starts a new sandbox from it as a new user', async () => {
      const source = await provider.create({ env: { SECRET_ENV: 'only-in-the-source' } })
      let snapshotId: string | undefined
      try {
        await source.writeFile('notes/a.txt', 'written before the snapshot')
        await source.exec('sh', [
          '-c',
          `mkdir -p /tmp/deep/dir && echo tmp > /tmp/deep/dir/t.txt && chmod 640 /tmp/deep/dir/t.txt && ln -s deep/dir/t.txt /tmp/link && echo scratch > ${SCRATCH}/s.txt && chmod 700 ${SCRATCH}`,
        ])
        const taken = await source.snapshot()
        snapshotId = taken.id
        expect(taken.id).toMatch(/^snp_[a-z2-7]{26}$/)
        expect(taken.memory).toBe(false)
        expect(taken.sizeBytes).toBeGreaterThan(0)
        expect(taken.sourceSandboxId).toBe(source.id)
        expect(taken.limits).toEqual({ memoryLimitMb: 96, maxProcesses: 40 })
        expect(taken.egress).toEqual({ kind: 'deny-all' })
        expect(
          events.some(
            (event) =>
              event.type === 'lifecycle' &&
              event.phase === 'snapshot' &&
              event.snapshotId === taken.id,
          ),
        ).toBe(true)

        // A local image, labelled as cordon's, and no helper container left.
        const images = await snapshotImages(taken.id)
        expect(images).toHaveLength(1)
        expect(images[0]!.Labels[LABEL.managed]).toBe('1')
        expect(images[0]!.Labels[LABEL.role]).toBe('snapshot')
        expect(images[0]!.RepoTags).toContain(`cordon-snapshot:${taken.id}`)
        expect(await helperContainers(taken.id)).toHaveLength(0)
        expect((await provider.snapshots.list()).map((listed) => listed.id)).toContain(taken.id)

        // Writes after the snapshot are not in it.
        await source.writeFile('notes/a.txt', 'changed after the snapshot')

        const restored = await provider.create({ snapshot: taken.id })
        try {
          expect((await restored.readFile('notes/a.txt')).toString()).toBe(
            'written before the snapshot',
          )
          const listing = await restored.exec('sh', [
            '-c',
            `cat /tmp/link; stat -c '%a %u' /tmp/deep/dir/t.txt ${SCRATCH}/s.txt ${SCRATCH}; readlink /tmp/link; id -u`,
          ])
          expect(listing.exitCode).toBe(0)
          const lines = listing.stdout.trim().split('\n')
          const uid = restored.enforced.user!.uid
          expect(uid).not.toBe(source.enforced.user!.uid)
          expect(lines[0]).toBe('tmp')
          expect(lines[1]).toBe(`640 ${uid}`)
          expect(lines[2]).toBe(`644 ${uid}`)
          expect(lines[4]).toBe('deep/dir/t.txt')
          expect(lines[5]).toBe(String(uid))
          // Hardening, limits and egress kept: the snapshot's limits, no network.
          expect(restored.enforced.limits.memoryLimitMb).toBe(96)
          expect(restored.enforced.limits.maxProcesses).toBe(40)
          expect(restored.enforced.egress.kind).toBe('deny-all')
          const inspected = await docker.getContainer(`cordon-${restored.id}`).inspect()
          expect(inspected.HostConfig.ReadonlyRootfs).toBe(true)
          expect(inspected.HostConfig.CapDrop).toContain('ALL')
          expect(inspected.HostConfig.SecurityOpt).toContain('no-new-privileges:true')
          expect(inspected.HostConfig.NetworkMode).toBe('none')
          // The create call's environment, not the source's; no credential anywhere.
          const env = await restored.exec('env')
          expect(env.stdout).not.toContain('only-in-the-source')
          const grep = await restored.exec('sh', [
            '-c',
            'grep -r brokered-secret[-]value / 2>/dev/null; true',
          ])
          expect(grep.stdout).toBe('')
          // The new sandbox writes its own copy: the source's files are untouched.
          await restored.writeFile('notes/a.txt', 'the restored sandbox wrote this')
          expect((await source.readFile('notes/a.txt')).toString()).toBe(
            'changed after the snapshot',
          )
        } finally {
          await restored.destroy()
        }
      } finally {
        await source.destroy()
        if (snapshotId) await provider.snapshots.remove(snapshotId).catch(() => {})
      }
      expect(await snapshotImages(snapshotId!)).toHaveLength(0)
      await expect(provider.create({ snapshot: snapshotId! })).rejects.toSatisfy(
        SandboxSnapshotNotFoundError.isInstance,
      )
    })

    it("leaves out what its user cannot read: a mode-000 file, a closed directory, root's 0600 file", async () => {
      const source = await provider.create()
      let snapshotId: string | undefined
      try {
        // The sandbox's own file and directory without permission bits, and a
        // file of root's (put there past the agent): no command of the
        // sandbox reads any of them, so its snapshot must not either.
        const planted = await source.exec('sh', [
          '-c',
          [
            'echo mode-000-content-5e1d > /tmp/no-read && chmod 000 /tmp/no-read',
            `echo mode-000-content-3a7c > ${SCRATCH}/no-read && chmod 000 ${SCRATCH}/no-read`,
            'mkdir /tmp/closed && echo closed-dir-content-7b90 > /tmp/closed/f && chmod 000 /tmp/closed',
            'echo readable > /tmp/open',
          ].join(' && '),
        ])
        expect(planted.exitCode).toBe(0)
        const rootFile = await engineExec(
          `cordon-${source.id}`,
          ['sh', '-c', 'echo root-only-content-2c4f > /tmp/root-only && chmod 600 /tmp/root-only'],
          { user: '0:0' },
        )
        expect(rootFile.exitCode).toBe(0)
        const unread = await source.exec('sh', [
          '-c',
          `cat /tmp/no-read; cat ${SCRATCH}/no-read; cat /tmp/closed/f; cat /tmp/root-only`,
        ])
        expect(unread.stdout).toBe('')
        expect(unread.stderr.match(/Permission denied/g)).toHaveLength(4)

        const taken = await source.snapshot()
        snapshotId = taken.id
        const restored = await provider.create({ snapshot: taken.id })
        try {
          const left = await restored.exec('sh', [
            '-c',
            `for path in /tmp/no-read ${SCRATCH}/no-read /tmp/closed /tmp/root-only; do if [ -e $path ] || [ -L $path ]; then echo "kept $path"; fi; done; cat /tmp/open`,
          ])
          expect(left.stdout).toBe('readable\n')
          // Nor is any of it in the snapshot's image, where the restore reads from.
          const image = await restored.exec('sh', [
            '-c',
            `grep -rl -e -content- ${SNAPSHOT_DIRECTORY}/${taken.id}; cat ${SNAPSHOT_DIRECTORY}/${taken.id}/manifest.json`,
          ])
          const [found, manifest] = [
            image.stdout.slice(0, image.stdout.indexOf('{')),
            image.stdout.slice(image.stdout.indexOf('{')),
          ]
          expect(found).toBe('')
          expect((JSON.parse(manifest) as { skipped: string[] }).skipped).toEqual(
            expect.arrayContaining([
              '/tmp/no-read',
              `${SCRATCH}/no-read`,
              '/tmp/closed',
              '/tmp/root-only',
            ]),
          )
        } finally {
          await restored.destroy()
        }
      } finally {
        await source.destroy()
        if (snapshotId) await provider.snapshots.remove(snapshotId).catch(() => {})
      }
    })

    it('forks a running sandbox into independent sandboxes and leaves no snapshot behind', async () => {
      const source = await provider.create()
      try {
        await source.writeFile('state.txt', 'before the fork')
        // Files only: a memory fork's processes keep the source's uid (memory-snapshot.test.ts).
        const forks = await source.fork({ count: 2, memory: false })
        try {
          expect(forks).toHaveLength(2)
          const ids = new Set([source.id, ...forks.map((fork) => fork.id)])
          expect(ids.size).toBe(3)
          const uids = new Set([source, ...forks].map((sandbox) => sandbox.enforced.user!.uid))
          expect(uids.size).toBe(3)
          for (const fork of forks)
            expect((await fork.readFile('state.txt')).toString()).toBe('before the fork')
          await forks[0]!.writeFile('state.txt', 'fork 0')
          await forks[1]!.writeFile('state.txt', 'fork 1')
          await source.writeFile('state.txt', 'source')
          expect((await forks[0]!.readFile('state.txt')).toString()).toBe('fork 0')
          expect((await forks[1]!.readFile('state.txt')).toString()).toBe('fork 1')
          expect((await source.readFile('state.txt')).toString()).toBe('source')
          const forkEvent = events.find(
            (event) =>
              event.type === 'lifecycle' && event.phase === 'fork' && event.sandboxId === source.id,
          )
          expect(forkEvent).toBeDefined()
        } finally {
          await Promise.all(forks.map((fork) => fork.destroy()))
        }
        // The fork's snapshot is removed: its tag at once, its image with the last fork.
        const left = await docker.listImages({
          filters: { label: [`${LABEL.sandbox}=${source.id}`, `${LABEL.role}=snapshot`] },
        })
        expect(left).toHaveLength(0)
      } finally {
        await source.destroy()
      }
    })
  })
}

describe('snapshot garbage and failures', () => {
  let provider: CordonSandboxProvider
  beforeAll(() => {
    provider = createDockerSandboxProvider({
      backend: {
        tier: 'container',
        runtime: 'docker',
        image: BUSYBOX_IMAGE,
        labels: testRunLabels(),
      },
      layout: { outputs: { source: { type: 'ephemeral' } } },
    })
  })
  afterAll(async () => {
    await provider.close()
  })

  it('gc removes a snapshot past the retention it is given, and keeps a younger one', async () => {
    const source = await provider.create()
    try {
      const taken = await source.snapshot()
      try {
        const [image] = await snapshotImages(taken.id)
        const young = await collectGarbage({ docker, dryRun: true })
        expect(young.images).not.toContain(image!.Id)
        // Past the default retention (7 days)...
        const later = await collectGarbage({
          docker,
          dryRun: true,
          now: Date.now() + DEFAULT_SNAPSHOT_RETENTION_MS + 60_000,
        })
        expect(later.images).toContain(image!.Id)
        // ...and past one the host sets.
        await new Promise((resolve) => setTimeout(resolve, 50))
        const short = await collectGarbage({ docker, dryRun: true, snapshotRetentionMs: 10 })
        expect(short.images).toContain(image!.Id)
        const long = await collectGarbage({ docker, dryRun: true, snapshotRetentionMs: 3_600_000 })
        expect(long.images).not.toContain(image!.Id)
        expect(await snapshotImages(taken.id)).toHaveLength(1)
      } finally {
        await provider.snapshots.remove(taken.id)
      }
    } finally {
      await source.destroy()
    }
  })

  it('a removed snapshot stays while a container runs from it, and gc removes it once nothing does', async () => {
    const source = await provider.create()
    try {
      await source.writeFile('kept.txt', 'kept')
      const taken = await source.snapshot()
      const [image] = await snapshotImages(taken.id)
      const running = await provider.create({ snapshot: taken.id })
      await provider.snapshots.remove(taken.id)
      expect((await provider.snapshots.list()).map((listed) => listed.id)).not.toContain(taken.id)
      // Untagged, but the running sandbox still has its files.
      expect((await running.readFile('kept.txt')).toString()).toBe('kept')
      expect((await docker.getImage(image!.Id).inspect()).RepoTags).toEqual([])
      // Another container holds the image too, so it outlives the last sandbox...
      const holder = await docker.createContainer({
        Image: image!.Id,
        Entrypoint: ['/bin/true'],
        Labels: testRunLabels(),
      })
      await running.destroy()
      expect((await docker.getImage(image!.Id).inspect()).Id).toBe(image!.Id)
      // ...and once nothing uses it, gc removes it.
      await holder.remove({ force: true })
      await collectGarbage({ docker, labels: testRunLabels() })
      // Every sweep on the engine removes such an image: a provider of another
      // package's tests may have taken it first. Gone either way.
      await expect(docker.getImage(image!.Id).inspect()).rejects.toThrow()
    } finally {
      await source.destroy()
    }
  })

  it('a snapshot aborted half-way leaves no image and no helper container', async () => {
    const source = await provider.create()
    try {
      await source.exec('sh', ['-c', 'dd if=/dev/zero of=/tmp/big bs=1M count=40 2>/dev/null'])
      const controller = new AbortController()
      const watching = (async () => {
        for (let attempt = 0; attempt < 2_000 && !controller.signal.aborted; attempt++) {
          const helpers = await docker.listContainers({
            all: true,
            filters: { label: [`${LABEL.sandbox}=${source.id}`, `${LABEL.role}=snapshot`] },
          })
          if (helpers.length > 0) controller.abort(new Error('stopped half-way'))
          else await new Promise((resolve) => setTimeout(resolve, 10))
        }
      })()
      const outcome = await source.snapshot({ signal: controller.signal }).then(
        () => 'taken',
        (error: unknown) => error,
      )
      controller.abort()
      await watching
      expect(SandboxAbortedError.isInstance(outcome), String(outcome)).toBe(true)
      expect(outcome).toMatchObject({
        operation: 'snapshot',
        cause: { message: 'stopped half-way' },
      })
      const left = { label: [`${LABEL.sandbox}=${source.id}`, `${LABEL.role}=snapshot`] }
      expect(await docker.listContainers({ all: true, filters: left })).toHaveLength(0)
      expect(await docker.listImages({ filters: left })).toHaveLength(0)
      // The sandbox goes on, and a snapshot taken now works.
      expect((await source.exec('echo', ['ok'])).stdout).toBe('ok\n')
    } finally {
      await source.destroy()
    }
  })

  it('a fork aborted once its snapshot is taken is a SandboxAbortedError and leaves no fork and no snapshot', async () => {
    const source = await provider.create()
    try {
      const controller = new AbortController()
      const snapshotImages = {
        label: [`${LABEL.sandbox}=${source.id}`, `${LABEL.role}=snapshot`],
      }
      const watching = (async () => {
        for (let attempt = 0; attempt < 2_000 && !controller.signal.aborted; attempt++) {
          if ((await docker.listImages({ filters: snapshotImages })).length > 0)
            controller.abort(new Error('no forks after all'))
          else await new Promise((resolve) => setTimeout(resolve, 10))
        }
      })()
      const outcome = await source
        .fork({ count: 2, memory: false, signal: controller.signal })
        .then(
          (forks) => forks,
          (error: unknown) => error,
        )
      controller.abort()
      await watching
      expect(SandboxAbortedError.isInstance(outcome), String(outcome)).toBe(true)
      expect(outcome).toMatchObject({ operation: 'fork', cause: { message: 'no forks after all' } })
      // Only the source runs under this run's labels, and its snapshot is gone.
      const running = await docker.listContainers({
        all: true,
        filters: { label: Object.entries(testRunLabels()).map(([k, v]) => `${k}=${v}`) },
      })
      expect(running.map((container) => container.Names[0])).toEqual([`/cordon-${source.id}`])
      expect(await docker.listImages({ filters: snapshotImages })).toHaveLength(0)
      expect((await source.exec('echo', ['ok'])).stdout).toBe('ok\n')
    } finally {
      await source.destroy()
    }
  })

  it('a snapshot given up while the engine is slow to make its helper leaves nothing once it rejects', async () => {
    // The engine takes the helper's create only after the snapshot was given
    // up: a call cut off on the client would still land, after the rejection.
    const front = await engineFront({
      hold: { request: '/containers/create?name=cordon-snapshot-', ms: 400 },
    })
    const slowEngine = createDockerSandboxProvider({
      backend: {
        tier: 'container',
        runtime: 'docker',
        image: BUSYBOX_IMAGE,
        labels: testRunLabels(),
        socketPath: front.socketPath,
      },
      layout: { outputs: { source: { type: 'ephemeral' } } },
    })
    try {
      const source = await slowEngine.create()
      try {
        const controller = new AbortController()
        void front.held.then(() => controller.abort(new Error('given up')))
        const outcome = await source.snapshot({ signal: controller.signal }).then(
          () => 'taken',
          (error: unknown) => error,
        )
        // Whatever the engine did with the create, it has answered by now.
        await front.answered
        const left = { label: [`${LABEL.sandbox}=${source.id}`, `${LABEL.role}=snapshot`] }
        expect(await docker.listContainers({ all: true, filters: left })).toHaveLength(0)
        expect(await docker.listImages({ filters: left })).toHaveLength(0)
        expect(SandboxAbortedError.isInstance(outcome), String(outcome)).toBe(true)
        expect(outcome).toMatchObject({ operation: 'snapshot', cause: { message: 'given up' } })
        expect((await source.exec('echo', ['ok'])).stdout).toBe('ok\n')
      } finally {
        await source.destroy()
      }
    } finally {
      await slowEngine.close()
      await front.close()
    }
  })

  it('refuses an unknown snapshot with a typed error naming it', async () => {
    const error = await provider
      .create({ snapshot: 'snp_aaaaaaaaaaaaaaaaaaaaaaaaaa' })
      .catch((caught: unknown) => caught)
    expect(SandboxSnapshotNotFoundError.isInstance(error)).toBe(true)
    expect(error).toMatchObject({ snapshotId: 'snp_aaaaaaaaaaaaaaaaaaaaaaaaaa' })
  })
})
