import { randomUUID } from 'node:crypto'
import { mkdirSync, mkdtempSync, rmSync, symlinkSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import {
  SandboxAbortedError,
  SandboxConfigValidationError,
  SandboxOperationError,
} from '@cordon/core'
import { BUSYBOX_IMAGE, testRunLabels } from '@cordon/test-support'
import { afterEach, beforeAll, describe, expect, it } from 'vitest'
import {
  buildImage,
  CORDON_LABELS,
  ImageBuildError,
  type ImageBuildProgress,
  prepareAgentRuntime,
} from '../src/index.js'
import { docker, testProvider } from './test-run.js'

const contexts: string[] = []
const tags: string[] = []

/** A build context directory with these files (`->` makes a link). */
function context(files: Record<string, string>): string {
  const dir = mkdtempSync(join(tmpdir(), 'cordon-build-context-'))
  contexts.push(dir)
  for (const [name, content] of Object.entries(files)) {
    mkdirSync(join(dir, name, '..'), { recursive: true })
    if (content.startsWith('->')) symlinkSync(content.slice(2), join(dir, name))
    else writeFileSync(join(dir, name), content)
  }
  return dir
}

function tag(): string {
  const name = `cordon-test-build-${randomUUID().slice(0, 8)}:1`
  tags.push(name)
  return name
}

async function imageExists(name: string): Promise<boolean> {
  return docker
    .getImage(name)
    .inspect()
    .then(
      () => true,
      () => false,
    )
}

const labels = testRunLabels()

afterEach(async () => {
  for (const name of tags.splice(0)) {
    await docker
      .getImage(name)
      .remove()
      .catch(() => {})
  }
  for (const dir of contexts.splice(0)) rmSync(dir, { recursive: true, force: true })
})

describe('buildImage', () => {
  // The runtime's long-lived helper container runs from the image of the
  // create that prepares the runtime: from busybox, not an image built here.
  beforeAll(async () => {
    await prepareAgentRuntime({ image: BUSYBOX_IMAGE })
  }, 180_000)

  it("builds from a Dockerfile directory with RUN and COPY steps, honours .dockerignore, labels the image cordon's, and a sandbox runs from it", async () => {
    const dir = context({
      Dockerfile: `FROM ${BUSYBOX_IMAGE}\nARG GREETING\nUSER 0\nCOPY . /template\nRUN echo "$GREETING from a build" > /template/built.txt\nUSER 1000:1000\n`,
      'tool.sh': 'echo tool\n',
      'nested/data.txt': 'nested data\n',
      'secret.env': 'TOKEN=do-not-send\n',
      'ignored-dir/big.bin': 'x',
      '.dockerignore': 'secret.env\nignored-dir\n',
      'outside-link': '->/etc/passwd',
    })
    const image = tag()
    const progress: ImageBuildProgress[] = []
    const built = await buildImage(
      {},
      {
        context: dir,
        tag: image,
        buildArgs: { GREETING: 'hello' },
        labels,
        onProgress: (entry) => progress.push(entry),
      },
    )
    expect(built.tag).toBe(image)
    expect(built.id).toMatch(/^sha256:[0-9a-f]{64}$/)
    const info = await docker.getImage(image).inspect()
    expect(info.Id).toBe(built.id)
    expect(info.Config.Labels).toMatchObject({
      [CORDON_LABELS.managed]: '1',
      [CORDON_LABELS.role]: 'image',
      ...labels,
    })
    // Step headers come with their numbers; each line is whole.
    expect(progress).toContainEqual({
      step: 3,
      steps: expect.any(Number),
      line: expect.stringMatching(/^Step 3\/\d+ : USER 0$/),
    })
    expect(progress.every((entry) => !entry.line.includes('\n'))).toBe(true)

    const provider = testProvider({ image })
    try {
      const sandbox = await provider.create()
      const listing = await sandbox.exec('sh', [
        '-c',
        'cat /template/built.txt /template/nested/data.txt; ls -a /template; readlink /template/outside-link; cat /template/Dockerfile',
      ])
      expect(listing.stdout).toContain('hello from a build')
      expect(listing.stdout).toContain('nested data')
      expect(listing.stdout).toContain('tool.sh')
      expect(listing.stdout).not.toContain('secret.env')
      expect(listing.stdout).not.toContain('ignored-dir')
      // A link is sent as a link, never as what it points to outside the context.
      expect(listing.stdout).toContain('/etc/passwd')
      // The Dockerfile the engine read, with the LABEL step cordon adds after FROM (README, Limits).
      expect(listing.stdout).toContain('LABEL "cordon-test.run"=')
      await sandbox.destroy()
    } finally {
      await provider.close()
    }
  })

  it('a failing step ends in ImageBuildError naming the step, with its output, and leaves no image behind', async () => {
    const marker = randomUUID()
    const dir = context({
      Dockerfile: `FROM ${BUSYBOX_IMAGE}\nCOPY a.txt /a.txt\nRUN echo ${marker}-first\nRUN echo ${marker}-broken >&2; exit 3\n`,
      // Content of its own: a step the build cache answers makes no image of this build's.
      'a.txt': marker,
    })
    const image = tag()
    const made: string[] = []
    const failure = await buildImage(
      {},
      {
        context: dir,
        tag: image,
        labels,
        onProgress: ({ line }) => {
          const result = /^ ---> ([0-9a-f]{12})$/.exec(line)
          if (result) made.push(result[1]!)
        },
      },
    ).then(
      () => undefined,
      (error: unknown) => error,
    )
    expect(ImageBuildError.isInstance(failure), String(failure)).toBe(true)
    expect(SandboxOperationError.isInstance(failure)).toBe(true)
    const error = failure as ImageBuildError
    expect(error).toMatchObject({
      image,
      step: 4,
      instruction: `RUN echo ${marker}-broken >&2; exit 3`,
      operation: 'buildImage',
      code: 'OPERATION_FAILED',
    })
    expect(error.message).toContain('returned a non-zero code: 3')
    expect(error.output.join('\n')).toContain(`${marker}-broken`)
    expect(await imageExists(image)).toBe(false)
    // The base image, then the images of steps 2 and 3: only cordon's two are gone.
    expect(made).toHaveLength(3)
    expect(await imageExists(made[0]!)).toBe(true)
    for (const id of made.slice(1)) expect(await imageExists(id), id).toBe(false)
    const containers = await docker.listContainers({ all: true })
    expect(containers.filter((container) => container.Command.includes(marker))).toEqual([])
  })

  it('an abort ends the build on the engine and leaves nothing', async () => {
    const marker = randomUUID()
    const dir = context({
      Dockerfile: `FROM ${BUSYBOX_IMAGE}\nCOPY a.txt /a.txt\nRUN echo ${marker} && sleep 60\n`,
      'a.txt': marker,
    })
    const image = tag()
    const controller = new AbortController()
    const made: string[] = []
    const building = buildImage(
      {},
      {
        context: dir,
        tag: image,
        labels,
        signal: controller.signal,
        onProgress: ({ line }) => {
          const result = /^ ---> ([0-9a-f]{12})$/.exec(line)
          if (result) made.push(result[1]!)
          if (line === marker) controller.abort()
        },
      },
    )
    const failure = await building.then(
      () => undefined,
      (error: unknown) => error,
    )
    expect(SandboxAbortedError.isInstance(failure), String(failure)).toBe(true)
    expect(await imageExists(image)).toBe(false)
    // The COPY step's image is removed; the step container goes with the engine's build.
    expect(made).toHaveLength(2)
    expect(await imageExists(made[1]!)).toBe(false)
    const deadline = Date.now() + 15_000
    for (;;) {
      const containers = await docker.listContainers({ all: true })
      if (!containers.some((container) => container.Command.includes(marker))) break
      if (Date.now() > deadline) throw new Error('the step container outlived the aborted build')
      await new Promise((resolve) => setTimeout(resolve, 200))
    }
  })

  it('refuses unusable options, naming every problem', async () => {
    const dir = context({ 'not-a-dockerfile': 'x' })
    const failure = await buildImage(
      {},
      {
        context: dir,
        tag: ' ',
        dockerfile: '../Dockerfile',
        labels: { 'cordon.role': 'x' },
        timeoutMs: -1,
      },
    ).then(
      () => undefined,
      (error: unknown) => error,
    )
    expect(SandboxConfigValidationError.isInstance(failure)).toBe(true)
    expect((failure as SandboxConfigValidationError).issues.map((issue) => issue.path)).toEqual([
      'tag',
      'dockerfile',
      'labels.cordon.role',
      'timeoutMs',
    ])
    const missing = await buildImage({}, { context: dir, tag: tag() }).then(
      () => undefined,
      (error: unknown) => error,
    )
    expect((missing as SandboxConfigValidationError).issues).toEqual([
      { path: 'dockerfile', message: 'the context has no file Dockerfile' },
    ])
    // A tag the engine cannot parse, or one naming a digest, is refused before the engine sees it.
    for (const [badTag, why] of [
      ['Agent-Tools:1', /the repository name must be lowercase/],
      ['agent tools', /not an image reference the engine accepts/],
      [`agent-tools@sha256:${'a'.repeat(64)}`, /names a digest/],
    ] as const) {
      const refused = await buildImage({}, { context: dir, tag: badTag }).then(
        () => undefined,
        (error: unknown) => error,
      )
      expect((refused as SandboxConfigValidationError).issues, badTag).toEqual([
        { path: 'tag', message: expect.stringMatching(why) },
      ])
    }
  })
})
