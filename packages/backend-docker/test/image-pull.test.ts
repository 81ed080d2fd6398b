import { randomBytes } from 'node:crypto'
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import {
  type CordonSandboxProvider,
  SandboxAbortedError,
  SandboxCreateTimeoutError,
  type SandboxEvent,
  SandboxImagePullError,
  type SandboxLifecycleEvent,
  serializeSandboxError,
} from '@cordon/core'
import { BUSYBOX_IMAGE, engineLeftovers, testRunId, testRunLabels } from '@cordon/test-support'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import {
  type LocalRegistry,
  pushTestImage,
  type RegistryProxy,
  startLocalRegistry,
  startRegistryProxy,
} from '../../../tooling/engine/test-registry.mjs'
import { buildImage, createDockerSandboxProvider, prepareAgentRuntime } from '../src/index.js'
import { docker } from './test-run.js'

const PASSWORD = `pw-${randomBytes(12).toString('hex')}`
/** The size of the layer that makes the pushed image's pull download something. */
const PAYLOAD_BYTES = 4 * 1024 * 1024

let registry: LocalRegistry
let privateRegistry: LocalRegistry
let source: string
let payloadDigest: string
const proxies: RegistryProxy[] = []

/** The image's name in a registry: each test pulls a name of its own, so no test finds another's copy. */
function named(host: string, repository: string): string {
  return `${host}/cordon-test/${repository}:1`
}

function provider(
  image: string,
  extra: {
    registryAuth?: Record<string, { username: string; password: string }>
    readyTimeoutMs?: number
    events?: SandboxEvent[]
  } = {},
): CordonSandboxProvider {
  return createDockerSandboxProvider({
    backend: {
      tier: 'container',
      image,
      labels: testRunLabels(),
      ...(extra.registryAuth ? { registryAuth: extra.registryAuth } : {}),
      ...(extra.readyTimeoutMs ? { readyTimeoutMs: extra.readyTimeoutMs } : {}),
    },
    layout: { outputs: { source: { type: 'ephemeral' } } },
    onEvent: (event) => extra.events?.push(event),
  })
}

function pullEvents(events: readonly SandboxEvent[]): SandboxLifecycleEvent[] {
  return events.filter(
    (event): event is SandboxLifecycleEvent =>
      event.type === 'lifecycle' && event.phase.startsWith('image.pull.'),
  )
}

async function imageExists(image: string): Promise<boolean> {
  return docker
    .getImage(image)
    .inspect()
    .then(
      () => true,
      () => false,
    )
}

async function removeImage(image: string): Promise<void> {
  await docker
    .getImage(image)
    .remove()
    .catch(() => {})
}

async function proxy(options: { slowBlobs?: boolean } = {}): Promise<RegistryProxy> {
  const started = await startRegistryProxy(registry.port, options)
  proxies.push(started)
  return started
}

/** Resolves once `check` holds, polling; fails after `ms`. */
async function until(check: () => boolean | Promise<boolean>, ms: number, what: string) {
  const deadline = Date.now() + ms
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`)
    await new Promise((resolve) => setTimeout(resolve, 50))
  }
}

describe('pulling a missing image', () => {
  beforeAll(async () => {
    // The runtime's helper containers run from the image of the create that
    // prepares the runtime, and a long-lived one would hold a pulled image
    // (and its layers) on the engine: they are made from busybox first.
    await prepareAgentRuntime({ image: BUSYBOX_IMAGE })
    registry = await startLocalRegistry()
    privateRegistry = await startLocalRegistry({ users: { tester: PASSWORD } })
    // An image of this run's own, with a layer of random bytes, pushed under
    // every name the tests pull and then removed, so each pull downloads it.
    const context = mkdtempSync(join(tmpdir(), 'cordon-pull-context-'))
    try {
      const payload = randomBytes(PAYLOAD_BYTES)
      writeFileSync(join(context, 'payload'), payload)
      writeFileSync(
        join(context, 'Dockerfile'),
        `FROM ${BUSYBOX_IMAGE}\nCOPY payload /payload\nUSER 0\nRUN sha256sum /payload > /payload.sha256\n`,
      )
      source = `cordon-test-pull-source:${testRunId()}`
      await buildImage({}, { context, tag: source, labels: testRunLabels() })
      const { createHash } = await import('node:crypto')
      payloadDigest = createHash('sha256').update(payload).digest('hex')
    } finally {
      rmSync(context, { recursive: true, force: true })
    }
    for (const repository of ['pulled', 'shared', 'stalled', 'deadline', 'prepare-aborted']) {
      await pushTestImage(source, named(registry.host, repository))
    }
    await pushTestImage(source, named(privateRegistry.host, 'private'), {
      username: 'tester',
      password: PASSWORD,
      serveraddress: privateRegistry.host,
    })
    await removeImage(source)
  }, 120_000)

  afterAll(async () => {
    await removeImage(source)
    for (const started of proxies) await started.stop()
    await registry?.stop()
    await privateRegistry?.stop()
  })

  it('pulls the image a create names, reports progress as events, and runs a command in it', async () => {
    const image = named(registry.host, 'pulled')
    expect(await imageExists(image)).toBe(false)
    const events: SandboxEvent[] = []
    const sandboxes = provider(image, { events })
    try {
      const sandbox = await sandboxes.create()
      const result = await sandbox.exec('cat', ['/payload.sha256'])
      expect(result.stdout).toContain(payloadDigest)
      await sandbox.destroy()
    } finally {
      await sandboxes.close()
      await removeImage(image)
    }
    const pulls = pullEvents(events)
    expect(pulls[0]).toMatchObject({
      phase: 'image.pull.start',
      image,
      backend: 'container:docker',
    })
    const end = pulls.at(-1)!
    expect(end).toMatchObject({ phase: 'image.pull.end', image })
    expect(end.durationMs).toBeGreaterThan(0)
    // The random layer came over the wire; the busybox layer may have been there already.
    expect(end.pull!.layers).toBeGreaterThanOrEqual(2)
    expect(end.pull!.layersDone).toBe(end.pull!.layers)
    expect(end.pull!.downloadedBytes).toBeGreaterThan(PAYLOAD_BYTES / 2)
    expect(end.pull!.downloadedBytes).toBe(end.pull!.totalBytes)
    for (const event of pulls.slice(1, -1)) expect(event.phase).toBe('image.pull.progress')
    // The create's own events follow the pull.
    expect(events.indexOf(end)).toBeLessThan(
      events.findIndex((event) => event.type === 'lifecycle' && event.phase === 'create.ready'),
    )
  })

  it('shares one pull between concurrent creates of the same image, and sends credentials only to their own registry', async () => {
    const through = await proxy()
    const image = named(through.host, 'shared')
    const events: SandboxEvent[] = []
    const sandboxes = provider(image, {
      events,
      // A credential for another registry: it must not travel to this one.
      registryAuth: { [privateRegistry.host]: { username: 'tester', password: PASSWORD } },
    })
    try {
      const created = await Promise.all([
        sandboxes.create(),
        sandboxes.create(),
        sandboxes.create(),
      ])
      for (const sandbox of created) {
        expect((await sandbox.exec('cat', ['/payload.sha256'])).stdout).toContain(payloadDigest)
        await sandbox.destroy()
      }
    } finally {
      await sandboxes.close()
      await removeImage(image)
    }
    expect(pullEvents(events).filter((event) => event.phase === 'image.pull.start')).toHaveLength(1)
    // The engine asks for the tag's manifest once per pull.
    const tagLookups = through.requests.filter((entry) => entry.path.endsWith('/manifests/1'))
    expect(tagLookups).toHaveLength(1)
    expect(through.requests.some((entry) => entry.authorization)).toBe(false)
  })

  it('refuses a private image without credentials or with wrong ones, naming the image, and pulls it with them', async () => {
    const image = named(privateRegistry.host, 'private')
    for (const registryAuth of [
      undefined,
      { [privateRegistry.host]: { username: 'tester', password: `wrong-${PASSWORD}` } },
    ]) {
      const events: SandboxEvent[] = []
      const sandboxes = provider(image, { events, ...(registryAuth ? { registryAuth } : {}) })
      let failure: unknown
      try {
        await sandboxes.create()
      } catch (error) {
        failure = error
      } finally {
        await sandboxes.close()
      }
      expect(SandboxImagePullError.isInstance(failure), String(failure)).toBe(true)
      const error = failure as SandboxImagePullError
      expect(error).toMatchObject({
        code: 'IMAGE_PULL_FAILED',
        image,
        registry: privateRegistry.host,
        backend: 'container:docker',
      })
      expect(error.message).toContain(image)
      expect(error.reason).toContain(
        registryAuth ? 'refused the credential' : 'registryAuth has no credential',
      )
      const failed = pullEvents(events).at(-1)!
      expect(failed).toMatchObject({
        phase: 'image.pull.failed',
        image,
        error: { code: 'IMAGE_PULL_FAILED' },
      })
      // The secret is nowhere: not in the error, its cause, or any event.
      const serialized = JSON.stringify([serializeSandboxError(error), events])
      expect(serialized).not.toContain(PASSWORD)
    }
    const sandboxes = provider(image, {
      registryAuth: { [privateRegistry.host]: { username: 'tester', password: PASSWORD } },
    })
    try {
      const sandbox = await sandboxes.create()
      expect((await sandbox.exec('cat', ['/payload.sha256'])).stdout).toContain(payloadDigest)
      await sandbox.destroy()
    } finally {
      await sandboxes.close()
      await removeImage(image)
    }
  })

  it('fails fast with the typed error for a name the registry does not have', async () => {
    const image = named(registry.host, 'never-pushed')
    const sandboxes = provider(image)
    const started = Date.now()
    try {
      const failure = await sandboxes.create().then(
        () => undefined,
        (error: unknown) => error,
      )
      expect(SandboxImagePullError.isInstance(failure), String(failure)).toBe(true)
      expect((failure as SandboxImagePullError).image).toBe(image)
      expect((failure as SandboxImagePullError).reason).toMatch(/not found|manifest unknown/)
    } finally {
      await sandboxes.close()
    }
    expect(Date.now() - started).toBeLessThan(5_000)
  })

  it("never pulls cordon's own test image names from a registry, and says where they come from", async () => {
    const sandboxes = provider('cordon-test/never-built:1')
    try {
      const failure = await sandboxes.create().then(
        () => undefined,
        (error: unknown) => error,
      )
      expect(SandboxImagePullError.isInstance(failure), String(failure)).toBe(true)
      expect((failure as Error).message).toContain('tooling/engine/setup.sh')
      expect((failure as SandboxImagePullError).registry).toBe('docker.io')
    } finally {
      await sandboxes.close()
    }
  })

  it('an abort during a pull ends it on the engine and leaves nothing', async () => {
    const through = await proxy({ slowBlobs: true })
    const image = named(through.host, 'stalled')
    const events: SandboxEvent[] = []
    const sandboxes = provider(image, { events })
    const controller = new AbortController()
    try {
      const creating = sandboxes.create({ signal: controller.signal })
      creating.catch(() => {})
      // The engine is downloading a layer, slowly.
      await until(() => through.slowDownloads() > 0, 20_000, 'a layer download')
      const abortedAt = Date.now()
      controller.abort()
      const failure = await creating.then(
        () => undefined,
        (error: unknown) => error,
      )
      expect(SandboxAbortedError.isInstance(failure), String(failure)).toBe(true)
      expect(Date.now() - abortedAt).toBeLessThan(2_000)
      // The engine let go of the download: the pull ended there too.
      await until(() => through.slowDownloads() === 0, 10_000, 'the download to end')
      expect(await imageExists(image)).toBe(false)
      expect(pullEvents(events).at(-1)).toMatchObject({ phase: 'image.pull.failed', image })
    } finally {
      await sandboxes.close()
      await removeImage(image)
    }
    const found = await engineLeftovers()
    expect(found.containers).toEqual([])
    expect(found.volumes).toEqual([])
  })

  it("prepareAgentRuntime's pull, aborted, fails with SandboxAbortedError and ends on the engine", async () => {
    const through = await proxy({ slowBlobs: true })
    const image = named(through.host, 'prepare-aborted')
    const controller = new AbortController()
    const events: SandboxLifecycleEvent[] = []
    try {
      const preparing = prepareAgentRuntime(
        { image },
        { signal: controller.signal, onEvent: (event) => events.push(event) },
      )
      preparing.catch(() => {})
      await until(() => through.slowDownloads() > 0, 20_000, 'a layer download')
      // A plain abort(), as a command line's Ctrl-C gives: its reason is no error of cordon's.
      controller.abort()
      const failure = await preparing.then(
        () => undefined,
        (error: unknown) => error,
      )
      expect(SandboxAbortedError.isInstance(failure), String(failure)).toBe(true)
      expect(failure).toMatchObject({ code: 'ABORTED', operation: 'image pull' })
      await until(() => through.slowDownloads() === 0, 10_000, 'the download to end')
      expect(await imageExists(image)).toBe(false)
      expect(events.at(-1)).toMatchObject({ phase: 'image.pull.failed', image })
    } finally {
      await removeImage(image)
    }
  })

  it("the create's deadline bounds the pull, and the timeout names it", async () => {
    const through = await proxy({ slowBlobs: true })
    const image = named(through.host, 'deadline')
    const sandboxes = provider(image, { readyTimeoutMs: 3_000 })
    try {
      const failure = await sandboxes.create().then(
        () => undefined,
        (error: unknown) => error,
      )
      expect(SandboxCreateTimeoutError.isInstance(failure), String(failure)).toBe(true)
      expect((failure as SandboxCreateTimeoutError).phase).toBe(`pulling the image ${image}`)
      await until(() => through.slowDownloads() === 0, 10_000, 'the download to end')
      expect(await imageExists(image)).toBe(false)
    } finally {
      await sandboxes.close()
      await removeImage(image)
    }
  })
})
