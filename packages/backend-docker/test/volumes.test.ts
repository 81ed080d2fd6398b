import { randomBytes } from 'node:crypto'
import type { ContainerSandboxLayout, CordonSandboxProvider } from '@cordon/core'
import {
  ContainerSandboxLayoutValidationError,
  SandboxConfigValidationError,
  SandboxError,
  SandboxVolumeError,
} from '@cordon/core'
import { LABEL } from '@cordon/core/backend'
import { engineLeftovers, testRunLabels } from '@cordon/test-support'
import { afterAll, describe, expect, it } from 'vitest'
import { collectGarbage } from '../src/index.js'
import { engineVolumeName } from '../src/named-volumes.js'
import { docker, testProvider } from './test-run.js'

/**
 * Issue 29, item 5: named persistent volumes on the Docker Engine, proved
 * from inside real sandboxes under runc and gVisor: what one sandbox writes
 * another (of another uid) reads and writes after it is gone, also through
 * another provider; a volume is held to its size from inside; one sandbox
 * writes it at a time, any number read it; it is labelled as cordon's under a
 * name of cordon's own; `cordon gc` removes one only past a retention.
 */

const MiB = 1024 * 1024
const CAP_MB = 16
const RUNTIMES = ['docker', 'runsc'] as const

const made: string[] = []
const providers: CordonSandboxProvider[] = []

/** A volume name of this test run, and noted for removal at the end. */
function volumeName(purpose: string): string {
  const name = `t-${purpose}-${randomBytes(4).toString('hex')}`
  made.push(name)
  return name
}

function provider(
  runtime: 'docker' | 'runsc',
  layout: ContainerSandboxLayout,
): CordonSandboxProvider {
  const made = testProvider({ runtime }, { layout })
  providers.push(made)
  return made
}

/** A layout whose outputs (the writable working directory) are the volume. */
const writing = (name: string): ContainerSandboxLayout => ({
  outputs: { source: { type: 'volume', name } },
})
/** A layout that mounts the volume read-only as the uploads. */
const reading = (name: string): ContainerSandboxLayout => ({
  outputs: { source: { type: 'ephemeral' } },
  uploads: { source: { type: 'volume', name } },
})
const UPLOADS = '/mnt/user-data/uploads'

afterAll(async () => {
  for (const each of providers.splice(0)) await each.close()
  const volumes = testProvider().volumes
  for (const name of made.splice(0))
    await volumes.remove(name).catch((error: unknown) => {
      if (!(SandboxVolumeError.isInstance(error) && error.reason === 'not-found')) throw error
    })
  const leftovers = await engineLeftovers()
  expect(leftovers.containers).toEqual([])
  expect(leftovers.volumes.filter((volume) => volume.includes('cordon-volume'))).toEqual([])
})

describe('named volumes (Docker)', () => {
  for (const runtime of RUNTIMES) {
    it(`what one sandbox writes, the next (another uid, another provider) reads and writes (${runtime})`, async () => {
      const name = volumeName('persist')
      const first = provider(runtime, writing(name))
      const created = await first.volumes.create({ name, sizeMb: 64 })
      expect(created).toMatchObject({ name, sizeMb: 64, usedBy: [] })

      const writer = await first.create()
      const firstUid = writer.enforced.user!.uid
      expect(
        (
          await writer.exec('sh', [
            '-c',
            'mkdir -p deep/er && echo one > deep/er/note && chmod 600 deep/er/note && chmod 700 deep && id -u',
          ])
        ).stdout.trim(),
      ).toBe(String(firstUid))
      const listed = (await first.volumes.list()).find((volume) => volume.name === name)
      expect(listed?.usedBy).toEqual([{ sandboxId: writer.id, access: 'read-write' }])
      await writer.destroy()
      await first.close()

      // Another provider instance, as another process would make: the volume is the engine's.
      const second = provider(runtime, writing(name))
      const next = await second.create()
      const nextUid = next.enforced.user!.uid
      expect(nextUid).not.toBe(firstUid)
      const result = await next.exec('sh', [
        '-c',
        'cat deep/er/note && echo two >> deep/er/note && touch deep/new && stat -c %u deep deep/er/note deep/new',
      ])
      expect(result.exitCode).toBe(0)
      expect(result.stdout).toBe(`one\n${nextUid}\n${nextUid}\n${nextUid}\n`)
      expect((await next.readFile('deep/er/note')).toString()).toBe('one\ntwo\n')
      await next.destroy()
      const after = (await second.volumes.list()).find((volume) => volume.name === name)
      expect(after?.usedBy).toEqual([])
      expect(after?.lastUsedAt).toBeGreaterThanOrEqual(created.createdAt)
      await second.volumes.remove(name)
      expect((await second.volumes.list()).map((volume) => volume.name)).not.toContain(name)
    })

    it(`a volume is held to its size from inside, and what it held is kept (${runtime})`, async () => {
      const name = volumeName('cap')
      const host = provider(runtime, writing(name))
      await host.volumes.create({ name, sizeMb: CAP_MB })
      const sandbox = await host.create()
      // One file stops at the cap exactly (alone, it is within it) and the sandbox lives on.
      const written = await sandbox.exec('sh', [
        '-c',
        `dd if=/dev/zero of=big bs=1M count=${CAP_MB * 4} 2>&1; echo "dd=$?"`,
      ])
      expect(written.stdout).not.toContain('dd=0')
      expect(Number((await sandbox.exec('stat', ['-c', '%s', 'big'])).stdout.trim())).toBe(
        CAP_MB * MiB,
      )
      expect(sandbox.endReason).toBeUndefined()
      expect((await sandbox.exec('rm', ['big'])).exitCode).toBe(0)
      await sandbox.writeFile('kept.txt', 'written before the cap\n')

      // Many files past the cap end the sandbox, as a capped host directory's do.
      const flood = [
        'for w in 1 2 3 4; do',
        '  (i=0; while :; do head -c 1048576 /dev/zero > "w$w-$i" || exit 1; i=$((i+1)); done) &',
        'done',
        'wait',
      ].join('\n')
      await sandbox.exec('sh', ['-c', flood], { timeout: 60_000 }).catch(() => undefined)
      for (let polled = 0; sandbox.endReason === undefined && polled < 400; polled++)
        await new Promise((resolve) => setTimeout(resolve, 50))
      expect(sandbox.endReason).toBe('storage-limit')
      await sandbox.destroy()
      // Past its size now, it is refused read-write (the agent refuses a capped directory past its cap)...
      const refused = await provider(runtime, writing(name))
        .create()
        .catch((error: unknown) => error)
      expect(SandboxError.isInstance(refused), String(refused)).toBe(true)
      expect(String((refused as Error).message)).toContain(`over its cap of ${CAP_MB * MiB}`)

      // ...and what it held before is there for the next sandbox, read-only.
      const reader = await provider(runtime, reading(name)).create()
      expect((await reader.exec('cat', [`${UPLOADS}/kept.txt`])).stdout).toBe(
        'written before the cap\n',
      )
      await reader.destroy()
    })

    it(`one sandbox writes a volume at a time, any number read it (${runtime})`, async () => {
      const name = volumeName('claim')
      const host = provider(runtime, writing(name))
      await host.volumes.create({ name, sizeMb: 32 })
      const writer = await host.create()
      await writer.writeFile('shared.txt', 'from the writer\n')
      await writer.exec('sh', ['-c', 'echo mine > private && chmod 600 private'])

      // A second writer, and a reader beside the writer, are refused: nothing is created.
      for (const layout of [writing(name), reading(name)]) {
        const refused = await provider(runtime, layout)
          .create()
          .catch((error: unknown) => error)
        expect(SandboxVolumeError.isInstance(refused), String(refused)).toBe(true)
        expect((refused as SandboxVolumeError).reason).toBe('in-use')
        expect((refused as SandboxVolumeError).users).toEqual([
          { sandboxId: writer.id, access: 'read-write' },
        ])
      }
      // Removal is refused while it is mounted.
      const removal = await host.volumes.remove(name).catch((error: unknown) => error)
      expect(SandboxVolumeError.isInstance(removal)).toBe(true)
      expect((removal as SandboxVolumeError).reason).toBe('in-use')

      // A writer that died (its container killed under it) holds nothing.
      await docker.getContainer(`cordon-${writer.id}`).kill()
      for (let polled = 0; writer.status !== 'destroyed' && polled < 200; polled++)
        await new Promise((resolve) => setTimeout(resolve, 50))

      const readers = provider(runtime, reading(name))
      const [one, two] = await Promise.all([readers.create(), readers.create()])
      for (const reader of [one, two]) {
        expect((await reader.exec('cat', [`${UPLOADS}/shared.txt`])).stdout).toBe(
          'from the writer\n',
        )
        // Not re-owned for readers: a file the writer kept to itself stays its own.
        expect((await reader.exec('cat', [`${UPLOADS}/private`])).exitCode).not.toBe(0)
        const write = await reader.exec('sh', ['-c', `echo x > ${UPLOADS}/shared.txt`])
        expect(write.exitCode).not.toBe(0)
        const mounts = (await reader.exec('cat', ['/proc/mounts'])).stdout
        const line = mounts.split('\n').find((entry) => entry.split(' ')[1] === UPLOADS)
        expect(line?.split(' ')[3]?.split(',')).toContain('ro')
      }
      const users = (await readers.volumes.list()).find((volume) => volume.name === name)?.usedBy
      expect(users?.map((user) => user.access)).toEqual(['read-only', 'read-only'])
      // A writer is refused while they read.
      const refused = await provider(runtime, writing(name))
        .create()
        .catch((error: unknown) => error)
      expect((refused as SandboxVolumeError).reason).toBe('in-use')
      await one.destroy()
      await two.destroy()
      const again = await provider(runtime, writing(name)).create()
      expect((await again.readFile('shared.txt')).toString()).toBe('from the writer\n')
      await again.destroy()
    })
  }

  it("a volume is an engine volume labelled as cordon's, under a name of cordon's own", async () => {
    const name = volumeName('labels')
    const host = testProvider()
    providers.push(host)
    await host.volumes.create({ name, sizeMb: 8 })
    const inspected = await docker.getVolume(engineVolumeName(name)).inspect()
    expect(inspected.Name).toBe(`cordon-volume.${name}`)
    expect(inspected.Labels).toMatchObject({
      [LABEL.managed]: '1',
      [LABEL.role]: 'volume',
      [LABEL.provider]: host.instanceId,
      [LABEL.ownerPid]: String(process.pid),
      'cordon.volume.name': name,
      'cordon.volume.size-mb': '8',
      ...testRunLabels(),
    })
    const twice = await host.volumes.create({ name, sizeMb: 8 }).catch((error: unknown) => error)
    expect((twice as SandboxVolumeError).reason).toBe('exists')
  })

  it('an engine volume cordon did not make is never taken over, mounted or removed', async () => {
    const name = volumeName('foreign')
    await docker.createVolume({ Name: engineVolumeName(name), Labels: testRunLabels() })
    const host = provider('docker', writing(name))
    try {
      const taken = await host.volumes.create({ name, sizeMb: 8 }).catch((error: unknown) => error)
      expect((taken as SandboxVolumeError).reason).toBe('exists')
      expect((taken as Error).message).toContain('cordon did not make')
      expect((await host.volumes.list()).map((volume) => volume.name)).not.toContain(name)
      const removal = await host.volumes.remove(name).catch((error: unknown) => error)
      expect((removal as SandboxVolumeError).reason).toBe('not-found')
      const mounted = await host.create().catch((error: unknown) => error)
      expect((mounted as SandboxVolumeError).reason).toBe('not-found')
      // It is still there, as it was.
      const inspected = await docker.getVolume(engineVolumeName(name)).inspect()
      expect(inspected.Labels).toEqual(testRunLabels())
    } finally {
      await docker.getVolume(engineVolumeName(name)).remove()
    }
  })

  it('a layout naming a missing volume is refused at create, and nothing is made', async () => {
    const name = volumeName('missing')
    const host = provider('docker', writing(name))
    const refused = await host.create().catch((error: unknown) => error)
    expect(SandboxVolumeError.isInstance(refused)).toBe(true)
    expect((refused as SandboxVolumeError).reason).toBe('not-found')
    await expect(docker.getVolume(engineVolumeName(name)).inspect()).rejects.toMatchObject({
      statusCode: 404,
    })
    const mounting = await docker.listContainers({
      all: true,
      filters: { volume: [engineVolumeName(name)] },
    })
    expect(mounting).toEqual([])
  })

  it('bad names and sizes are typed errors', async () => {
    const host = testProvider()
    providers.push(host)
    for (const bad of [
      { name: '../etc', sizeMb: 8 },
      { name: '', sizeMb: 8 },
      { name: 'ok', sizeMb: 0 },
      { name: 'ok', sizeMb: 1.5 },
    ]) {
      const refused = await host.volumes.create(bad).catch((error: unknown) => error)
      expect(SandboxConfigValidationError.isInstance(refused), JSON.stringify(bad)).toBe(true)
    }
    const removal = await host.volumes.remove('a/b').catch((error: unknown) => error)
    expect(SandboxConfigValidationError.isInstance(removal)).toBe(true)
    expect(() => testProvider({}, { layout: writing('no..dots') })).toThrow(
      ContainerSandboxLayoutValidationError,
    )
  })

  it('gc keeps every volume by default, and past a retention removes only those unused for longer', async () => {
    const old = volumeName('gc-old')
    const busy = volumeName('gc-busy')
    const fresh = volumeName('gc-fresh')
    const volumesHost = testProvider()
    providers.push(volumesHost)
    const volumes = volumesHost.volumes
    for (const name of [old, busy, fresh]) await volumes.create({ name, sizeMb: 8 })
    const use = async (name: string) => {
      const sandbox = await provider('docker', writing(name)).create()
      await sandbox.writeFile('data', name)
      return sandbox
    }
    await (await use(old)).destroy()
    const holder = await use(busy)
    await new Promise((resolve) => setTimeout(resolve, 8_000))
    await (await use(fresh)).destroy()

    const kept = await collectGarbage({ docker })
    for (const name of [old, busy, fresh])
      expect(kept.namedVolumes.find((volume) => volume.name === name)?.removed).toBe(false)

    const listed = new Map((await volumes.list()).map((volume) => [volume.name, volume]))
    // Halfway between the two uses: the old one is past it, the fresh one within it.
    const retention = Date.now() - (listed.get(old)!.lastUsedAt + listed.get(fresh)!.lastUsedAt) / 2
    // Scoped to this test run: a retention this short would take other packages' test volumes too.
    const report = await collectGarbage({
      docker,
      volumeRetentionMs: retention,
      labels: testRunLabels(),
    })
    const fate = (name: string) => report.namedVolumes.find((volume) => volume.name === name)
    expect(fate(old)?.removed).toBe(true)
    expect(report.volumes).toContain(engineVolumeName(old))
    expect(fate(busy)).toMatchObject({ removed: false, usedBy: [{ sandboxId: holder.id }] })
    expect(fate(fresh)?.removed).toBe(false)
    const names = (await volumes.list()).map((volume) => volume.name)
    expect(names).not.toContain(old)
    expect(names).toEqual(expect.arrayContaining([busy, fresh]))
    // Its use records went with it.
    const records = await docker.listVolumes({
      filters: { label: [`${LABEL.role}=volume-use`, `cordon.volume.name=${old}`] },
    })
    expect(records.Volumes ?? []).toEqual([])
    await holder.destroy()
  })

  it('an error of the volume API names what to do, and is a SandboxError', async () => {
    const host = testProvider()
    providers.push(host)
    const missing = await host.volumes.remove('t-nothing-here').catch((error: unknown) => error)
    expect(SandboxError.isInstance(missing)).toBe(true)
    expect((missing as SandboxVolumeError).code).toBe('VOLUME_NOT_FOUND')
  })
})
