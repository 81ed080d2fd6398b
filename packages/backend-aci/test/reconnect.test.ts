import { execFile } from 'node:child_process'
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { fileURLToPath } from 'node:url'
import { promisify } from 'node:util'
import {
  type CordonSandboxProvider,
  SandboxConfigValidationError,
  SandboxControlRefusedError,
  SandboxCredentialRefusedError,
  SandboxNotFoundError,
} from '@cordon/core'
import { LABEL } from '@cordon/core/backend'
import { closeTestArmStandin, startTestArmStandin, type TestArmStandin } from '@cordon/test-support'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import {
  aciEntrypointPath,
  LIFETIME_CONFIG_MAP_KEY,
  removeEndedDetachedAciGroups,
  SECRET_CONFIG_MAP_KEY,
} from '../src/index.js'
import { backendConfig, startTestStandin, testProvider } from './standin-fixture.js'

const run = promisify(execFile)
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms))
const creator = fileURLToPath(new URL('./fixtures/detached-creator.mjs', import.meta.url))

/** What these tests read of a container group document. */
interface GroupDocument {
  readonly tags: Record<string, string>
  readonly properties: {
    readonly instanceView: { readonly state: string }
    readonly containers: Array<{
      readonly properties: { readonly configMap: { keyValuePairs: Record<string, string> } }
    }>
  }
}

/** The group a sandbox claimed, as ARM (the stand-in) answers a GET of it; undefined on 404. */
async function readGroup(
  standin: TestArmStandin,
  sandboxId: string,
): Promise<GroupDocument | undefined> {
  const { subscriptionId, resourceGroup } = standin.ids
  const response = await fetch(
    `${standin.url}/subscriptions/${subscriptionId}/resourceGroups/${resourceGroup}/providers/Microsoft.ContainerInstance/containerGroups/cordon-${sandboxId.slice(4)}?api-version=2025-09-01`,
    { headers: { authorization: `Bearer ${standin.token}` } },
  )
  if (response.status === 404) return undefined
  expect(response.status).toBe(200)
  return (await response.json()) as GroupDocument
}

/** Polls until `check` holds; false if it still does not after `withinMs`. */
async function eventually(check: () => Promise<boolean>, withinMs: number): Promise<boolean> {
  const deadline = Date.now() + withinMs
  while (Date.now() < deadline) {
    if (await check()) return true
    await sleep(500)
  }
  return check()
}

/** The secret held in a credential (the ACI state is JSON inside the credential's secret). */
function secretOf(credential: string): string {
  const fields = JSON.parse(Buffer.from(credential.split('.').pop()!, 'base64url').toString())
  return JSON.parse(fields.secret).secret as string
}

/** The credential with its secret changed (shape, sandbox and backend kept). */
function withWrongSecret(credential: string): string {
  const dot = credential.lastIndexOf('.')
  const fields = JSON.parse(Buffer.from(credential.slice(dot + 1), 'base64url').toString())
  const state = JSON.parse(fields.secret)
  state.secret = `${state.secret.slice(0, -4)}AAAA`
  fields.secret = JSON.stringify(state)
  return `${credential.slice(0, dot + 1)}${Buffer.from(JSON.stringify(fields)).toString('base64url')}`
}

/** A well-formed credential for `sandboxId` holding a made-up secret. */
function madeUpCredential(sandboxId: string, backend: string): string {
  const state = { secret: 'x'.repeat(43), env: {}, workingDirectory: '/mnt/user-data/outputs' }
  const fields = { sandboxId, backend, secret: JSON.stringify(state), endsAt: Date.now() + 60_000 }
  return `cordon-credential-v1.${Buffer.from(JSON.stringify(fields)).toString('base64url')}`
}

describe('reconnect on the ARM stand-in', () => {
  let standin: TestArmStandin
  let store: string
  let provider: CordonSandboxProvider
  beforeAll(async () => {
    standin = await startTestStandin({ poolSize: 3 })
    store = mkdtempSync(join(tmpdir(), 'cordon-aci-credentials-'))
    provider = testProvider(standin, { provider: { credentialStore: store } })
  })
  afterAll(async () => {
    await provider?.close()
    rmSync(store, { recursive: true, force: true })
    await closeTestArmStandin(standin)
  })

  it('a detached sandbox outlives the process that claimed it; this process connects by id, reads its file, lists it, and destroys it', async () => {
    const { stdout } = await run(process.execPath, [creator], {
      env: {
        ...process.env,
        CORDON_TEST_ACI_CONFIG: JSON.stringify(standin.backendConfig()),
        CORDON_TEST_ARM_TOKEN: standin.token,
        CORDON_TEST_STORE: store,
        CORDON_TEST_TEXT: 'left by another process',
      },
      timeout: 120_000,
    })
    const id = /sandbox (sbx_\w+)/.exec(stdout)?.[1]
    expect(id, stdout).toBeDefined()
    // The creator has exited (closing its provider): the group runs on, its credential kept here.
    const group = (await readGroup(standin, id!))!
    expect(group.properties.instanceView.state).toBe('Running')
    expect(group.tags[LABEL.detached]).toBe('1')
    expect(Number(group.tags[LABEL.expires])).toBeGreaterThan(Date.now())
    const credentialFile = join(store, `${id}.json`)
    expect(existsSync(credentialFile)).toBe(true)
    // The creator's end time (sandbox.endsAt, kept with its credential) is the one the tag holds.
    expect(JSON.parse(readFileSync(credentialFile, 'utf8')).endsAt).toBe(
      Number(group.tags[LABEL.expires]),
    )
    // No tag holds the secret.
    const secret = secretOf(JSON.parse(readFileSync(credentialFile, 'utf8')).credential)
    expect(JSON.stringify(group.tags)).not.toContain(secret)

    const sandbox = await provider.connect(id!)
    expect(sandbox.id).toBe(id)
    expect(sandbox.detached).toBe(true)
    expect(sandbox.endsAt).toBe(Number(group.tags[LABEL.expires]))
    expect((await sandbox.readFile('note.txt')).toString()).toBe('left by another process')
    // The creator's environment and working directory hold through the connection too.
    const said = await sandbox.exec('sh', ['-c', 'echo "$CREATOR_SAID" && pwd'])
    expect(said.stdout).toBe('hello from the creator\n/mnt/user-data/outputs/work\n')
    expect(sandbox.enforced.egress.kind).toBe('deny-all')

    // Listed: every detached sandbox of the resource group and this provider's own, nobody else's.
    const own = await provider.create()
    const stranger = testProvider(standin, { provider: { credentialStore: false } })
    const theirs = await stranger.create()
    try {
      const everything = await provider.list()
      const ids = everything.map((entry) => entry.id)
      expect(ids).toContain(own.id)
      expect(ids).not.toContain(theirs.id)
      expect(everything.find((entry) => entry.id === own.id)?.detached).toBe(false)
      const listed = everything.find((entry) => entry.id === id)
      expect(listed).toMatchObject({ id, status: 'running', detached: true })
      expect(listed?.endsAt).toBe(sandbox.endsAt)
      expect(listed?.labels[LABEL.managed]).toBe('1')
      expect(listed!.createdAt).toBeGreaterThan(Date.now() - 300_000)
      expect(listed!.createdAt).toBeLessThanOrEqual(Date.now())
    } finally {
      await Promise.all([own.destroy(), stranger.close()])
    }

    await sandbox.destroy()
    expect(await readGroup(standin, id!)).toBeUndefined()
    // Nothing is left to connect to: the credential went with it.
    expect(existsSync(credentialFile)).toBe(false)
    const again = await provider.connect(id!).catch((error: unknown) => error)
    expect(SandboxCredentialRefusedError.isInstance(again)).toBe(true)
  }, 240_000)

  it('only a holder of the credential connects: a wrong secret is refused by the agent, a missing one before anything is dialled; unknown, destroyed and attached sandboxes are not found', async () => {
    const sandbox = await provider.create({ detached: true, lifetimeMs: 120_000 })
    const wrong = testProvider(standin, { provider: { credentialStore: false } })
    try {
      const credential = sandbox.credential!
      const refused = await wrong
        .connect(sandbox.id, { credential: withWrongSecret(credential) })
        .catch((error: unknown) => error)
      expect(SandboxCredentialRefusedError.isInstance(refused)).toBe(true)
      expect((refused as Error).message).toMatch(/refused the credential/)
      const missing = await wrong.connect(sandbox.id).catch((error: unknown) => error)
      expect(SandboxCredentialRefusedError.isInstance(missing)).toBe(true)
      const unknownId = 'sbx_aaaaaaaaaaaaaaaaaaaaaaaaaa'
      const unknown = await wrong
        .connect(unknownId, { credential: madeUpCredential(unknownId, wrong.backend) })
        .catch((error: unknown) => error)
      expect(SandboxNotFoundError.isInstance(unknown)).toBe(true)
      // The right one, handed over by the host rather than a store, works; disconnect lets go.
      const reached = await wrong.connect(sandbox.id, { credential })
      expect((await reached.exec('echo', ['reached'])).stdout).toBe('reached\n')
      await reached.disconnect()
      // The sandbox is untouched by the refusals and the disconnect.
      expect((await sandbox.exec('echo', ['still mine'])).stdout).toBe('still mine\n')

      // A sandbox that is not detached cannot be reached from elsewhere, whatever credential is shown.
      const attached = await provider.create()
      try {
        expect(attached.credential).toBeUndefined()
        const notDetached = await wrong
          .connect(attached.id, { credential: madeUpCredential(attached.id, wrong.backend) })
          .catch((error: unknown) => error)
        expect(SandboxNotFoundError.isInstance(notDetached)).toBe(true)
        expect((notDetached as Error).message).toMatch(/not created detached/)
      } finally {
        await attached.destroy()
      }
    } finally {
      await sandbox.destroy()
      await wrong.close()
    }
    // A destroyed detached sandbox is not found, even with its credential.
    const notFound = await wrong
      .connect(sandbox.id, { credential: sandbox.credential! })
      .catch((error: unknown) => error)
    // The provider is closed: a fresh one asks ARM.
    const fresh = testProvider(standin, { provider: { credentialStore: false } })
    try {
      expect(notFound).toBeInstanceOf(Error)
      const gone = await fresh
        .connect(sandbox.id, { credential: sandbox.credential! })
        .catch((error: unknown) => error)
      expect(SandboxNotFoundError.isInstance(gone)).toBe(true)
    } finally {
      await fresh.close()
    }
  }, 240_000)

  it("sandbox code reads its agent's secret from the config map (the README's stated limit: on ACI it can answer the host as the agent)", async () => {
    const sandbox = await provider.create({ detached: true, lifetimeMs: 120_000 })
    try {
      // Any uid the sandbox runs commands as: the agent's own, which must read the file.
      const read = await sandbox.exec('sh', ['-c', `cat /mnt/configmap/*/${SECRET_CONFIG_MAP_KEY}`])
      expect(read.exitCode, read.stderr).toBe(0)
      expect(read.stdout.trim()).toBe(secretOf(sandbox.credential!))
    } finally {
      await sandbox.destroy()
    }
  })

  it('detached needs a lifetime', async () => {
    const noLifetime = await provider.create({ detached: true }).catch((error: unknown) => error)
    expect(SandboxConfigValidationError.isInstance(noLifetime)).toBe(true)
    expect((noLifetime as SandboxConfigValidationError).issues.map((issue) => issue.path)).toEqual([
      'lifetimeMs',
    ])
  })

  it('with no host left, the agent ends itself at its lifetime (the group stops), connect says it ended, and the sweep deletes the group', async () => {
    const other = testProvider(standin, { provider: { credentialStore: false } })
    // Long enough for a loaded machine to get through the claim and the checks below.
    const sandbox = await other.create({ detached: true, lifetimeMs: 20_000 })
    const credential = sandbox.credential!
    const before = (await readGroup(standin, sandbox.id))!
    expect(before.properties.containers[0]!.properties.configMap.keyValuePairs).toMatchObject({
      [LIFETIME_CONFIG_MAP_KEY]: '20000',
    })
    expect(
      Object.keys(before.properties.containers[0]!.properties.configMap.keyValuePairs),
    ).toContain(SECRET_CONFIG_MAP_KEY)
    await sandbox.writeFile('kept.txt', 'kept')
    // Let go of: closing the provider does not end a detached sandbox.
    await other.close()
    const reached = await provider.connect(sandbox.id, { credential })
    expect((await reached.readFile('kept.txt')).toString()).toBe('kept')
    await reached.disconnect()

    // Nobody holds it now: its agent ends it at its lifetime, and ACI shows the group Stopped.
    expect(
      await eventually(
        async () =>
          (await readGroup(standin, sandbox.id))?.properties.instanceView.state === 'Stopped',
        90_000,
      ),
      'the group stopped at its lifetime',
    ).toBe(true)
    const ended = await provider
      .connect(sandbox.id, { credential })
      .catch((error: unknown) => error)
    expect(SandboxNotFoundError.isInstance(ended)).toBe(true)
    expect((ended as Error).message).toMatch(/has ended/)
    expect((await provider.list()).find((entry) => entry.id === sandbox.id)?.status).toBe('ending')

    // The sweep (what `cordon gc` is for Docker) deletes past-end-time detached groups, and nothing else.
    const live = await provider.create({ detached: true, lifetimeMs: 120_000 })
    const attached = await provider.create()
    try {
      // A dry run names the group and deletes nothing.
      expect(await removeEndedDetachedAciGroups(backendConfig(standin), { dryRun: true })).toEqual([
        `cordon-${sandbox.id.slice(4)}`,
      ])
      expect((await readGroup(standin, sandbox.id))?.properties.instanceView.state).toBe('Stopped')
      const removed = await removeEndedDetachedAciGroups(backendConfig(standin))
      expect(removed).toEqual([`cordon-${sandbox.id.slice(4)}`])
      expect(await readGroup(standin, sandbox.id)).toBeUndefined()
      expect((await live.exec('echo', ['alive'])).stdout).toBe('alive\n')
      expect((await attached.exec('echo', ['alive'])).stdout).toBe('alive\n')
    } finally {
      await Promise.all([live.destroy(), attached.destroy()])
    }
  }, 240_000)

  it('each backend sweeps ended detached groups once, in the background of its first create, connect or list', async () => {
    const sandbox = await provider.create({ detached: true, lifetimeMs: 8_000 })
    await sandbox.disconnect()
    expect(
      await eventually(
        async () =>
          (await readGroup(standin, sandbox.id))?.properties.instanceView.state === 'Stopped',
        90_000,
      ),
    ).toBe(true)
    const next = testProvider(standin, { provider: { credentialStore: false } })
    try {
      await next.list()
      expect(
        await eventually(async () => (await readGroup(standin, sandbox.id)) === undefined, 60_000),
        "the new backend's sweep deleted the ended group",
      ).toBe(true)
    } finally {
      await next.close()
    }
  }, 180_000)
})

describe('reconnect with an entrypoint that does not apply the lifetime', () => {
  let standin: TestArmStandin
  let dir: string
  beforeAll(async () => {
    dir = mkdtempSync(join(tmpdir(), 'cordon-aci-old-entrypoint-'))
    // The entrypoint as it was before detached claims: it never reads the lifetime key.
    const script = readFileSync(aciEntrypointPath(), 'utf8').replace(
      /^lifetime_file=.*?^fi\n/ms,
      '',
    )
    expect(script).not.toContain('lifetime_file')
    const entrypointPath = join(dir, 'cordon-aci-entrypoint.sh')
    writeFileSync(entrypointPath, script, { mode: 0o755 })
    standin = await startTestArmStandin({ entrypointPath, poolSize: 1 })
  })
  afterAll(async () => {
    await closeTestArmStandin(standin)
    rmSync(dir, { recursive: true, force: true })
  })

  it('refuses the detached create naming detached and the backend, and deletes the group it claimed', async () => {
    const provider = testProvider(standin, { provider: { credentialStore: false } })
    try {
      const refused = await provider
        .create({ detached: true, lifetimeMs: 60_000 })
        .catch((error: unknown) => error)
      expect(SandboxControlRefusedError.isInstance(refused)).toBe(true)
      expect((refused as SandboxControlRefusedError).control).toBe('detached')
      expect((refused as SandboxControlRefusedError).backend).toBe(provider.backend)
      expect((refused as Error).message).toMatch(/cordon-aci-entrypoint\.sh/)
      expect(standin.groups()).toEqual([])
      // A sandbox that is not detached needs no lifetime from the entrypoint.
      const attached = await provider.create()
      expect((await attached.exec('echo', ['fine'])).stdout).toBe('fine\n')
      await attached.destroy()
    } finally {
      await provider.close()
    }
  }, 180_000)
})
