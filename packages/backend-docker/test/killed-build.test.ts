import { type ChildProcess, spawn } from 'node:child_process'
import { randomUUID } from 'node:crypto'
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { fileURLToPath } from 'node:url'
import { BUSYBOX_IMAGE, testRunLabels } from '@cordon/test-support'
import { afterEach, describe, expect, it } from 'vitest'
import { buildImage, collectGarbage } from '../src/index.js'
import { docker } from './test-run.js'

const cleanups: Array<() => unknown> = []

afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup()
})

/** A build context whose Dockerfile has a step unique to this test (`marker`) and a slow step. */
function slowBuild(marker: string): string {
  const dir = mkdtempSync(join(tmpdir(), 'cordon-killed-build-'))
  cleanups.push(() => rmSync(dir, { recursive: true, force: true }))
  writeFileSync(
    join(dir, 'Dockerfile'),
    `FROM ${BUSYBOX_IMAGE}\nRUN echo ${marker} > /tmp/marker\nRUN sleep 30\nRUN echo done\n`,
  )
  return dir
}

/**
 * A host process running `buildImage`: resolves once the engine runs the
 * slow step (its step images made, its step container running).
 */
async function hostBuilding(
  context: string,
  tag: string,
  labels: Record<string, string>,
): Promise<ChildProcess> {
  const script = `
    import { buildImage } from '@cordon/backend-docker'
    const [context, tag, labels] = process.argv.slice(1)
    await buildImage({}, { context, tag, labels: JSON.parse(labels), onProgress: ({ line }) => process.stdout.write(line + '\\n') })
  `
  const child = spawn(
    process.execPath,
    ['--input-type=module', '-e', script, context, tag, JSON.stringify(labels)],
    { cwd: fileURLToPath(new URL('..', import.meta.url)), stdio: ['ignore', 'pipe', 'pipe'] },
  )
  cleanups.push(() => child.kill('SIGKILL'))
  let output = ''
  await new Promise<void>((resolve, reject) => {
    child.stdout!.on('data', (chunk: Buffer) => {
      output += chunk.toString()
      if (/RUN sleep 30\n ---> Running in /.test(output)) resolve()
    })
    child.stderr!.on('data', (chunk: Buffer) => (output += chunk.toString()))
    child.on('exit', () => reject(new Error(`the build ended before its slow step: ${output}`)))
  })
  return child
}

async function killed(child: ChildProcess): Promise<void> {
  const exited = new Promise((resolve) => child.once('exit', resolve))
  child.kill('SIGKILL')
  await exited
}

/** Every image and container on the engine that came from this build, by label and by history. */
async function leftovers(marker: string, labels: Record<string, string>, since: Set<string>) {
  const label = Object.entries(labels).map(([key, value]) => `${key}=${value}`)
  const labelled = await docker.listImages({ all: true, filters: { label } })
  const containers = await docker.listContainers({ all: true, filters: { label } })
  // Unlabelled ones too: any image made since the test began whose history holds this build's step.
  const made: string[] = []
  for (const image of await docker.listImages({ all: true })) {
    if (since.has(image.Id)) continue
    const history = await docker
      .getImage(image.Id)
      .history()
      .catch(() => [] as Array<{ CreatedBy: string }>)
    if (history.some((entry: { CreatedBy: string }) => entry.CreatedBy.includes(marker)))
      made.push(image.Id)
  }
  const records = (await docker.listVolumes({ filters: { label } })).Volumes ?? []
  return {
    images: [...new Set([...labelled.map((image) => image.Id), ...made])],
    containers: containers.map((container) => container.Id),
    records: records.map((volume) => volume.Name),
  }
}

describe('a build whose host is killed', () => {
  it('gc leaves the steps of a build under way in a live host, and removes every image and container of it once that host is SIGKILLed', async () => {
    const marker = randomUUID()
    const labels = { ...testRunLabels(), 'cordon-test.build': marker }
    const tag = `cordon-test-killed-build-${marker.slice(0, 8)}:1`
    const before = new Set((await docker.listImages({ all: true })).map((image) => image.Id))
    const host = await hostBuilding(slowBuild(marker), tag, labels)

    // Live: between two steps its newest image is in no one's use, and must stay.
    const whileLive = await collectGarbage({ docker, labels })
    expect(whileLive.images).toEqual([])
    const live = await leftovers(marker, labels, before)
    expect(live.images.length).toBeGreaterThan(0)

    await killed(host)
    const report = await collectGarbage({ docker, labels })
    expect(report.failed).toEqual([])
    expect(await leftovers(marker, labels, before)).toEqual({
      images: [],
      containers: [],
      records: [],
    })
    expect(
      await docker
        .getImage(tag)
        .inspect()
        .then(
          () => true,
          () => false,
        ),
    ).toBe(false)
  }, 120_000)

  it("gc keeps a finished build's image and the step images it is built on (the engine's cache)", async () => {
    const marker = randomUUID()
    const labels = { ...testRunLabels(), 'cordon-test.build': marker }
    const tag = `cordon-test-killed-build-${marker.slice(0, 8)}:1`
    const dir = mkdtempSync(join(tmpdir(), 'cordon-finished-build-'))
    cleanups.push(() => rmSync(dir, { recursive: true, force: true }))
    writeFileSync(
      join(dir, 'Dockerfile'),
      `FROM ${BUSYBOX_IMAGE}\nRUN echo ${marker} > /tmp/marker\nRUN echo second > /tmp/second\n`,
    )
    const built = await buildImage({}, { context: dir, tag, labels })
    cleanups.push(() =>
      docker
        .getImage(built.id)
        .remove()
        .catch(() => {}),
    )
    const parent = (await docker.getImage(built.id).inspect()).Parent
    expect(parent).not.toBe('')

    const report = await collectGarbage({ docker, labels })
    expect(report.images).toEqual([])
    expect((await docker.getImage(tag).inspect()).Id).toBe(built.id)
    expect((await docker.getImage(parent).inspect()).Id).toBe(parent)
    // Finished: its record is gone with it.
    expect(
      (await docker.listVolumes({ filters: { label: [`cordon-test.build=${marker}`] } })).Volumes ??
        [],
    ).toEqual([])
  }, 120_000)
})
