import { execFile } from 'node:child_process'
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { fileURLToPath } from 'node:url'
import { promisify } from 'node:util'
import {
  type CordonSandboxProvider,
  SandboxCredentialRefusedError,
  SandboxNotFoundError,
} from '@cordon/core'
import { LABEL } from '@cordon/core/backend'
import { startTestOrchestrator, type TestOrchestratorStandin } from '@cordon/test-support'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { createMicroVMSandboxProvider, removeEndedDetachedMicroVMGuests } from '../src/index.js'
import { refusingFront } from './refusing-front.js'

const run = promisify(execFile)
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms))
const creator = fileURLToPath(new URL('./fixtures/detached-creator.mjs', import.meta.url))

/** The guest as the control plane describes it; undefined on 404. */
async function describeGuest(
  standin: TestOrchestratorStandin,
  sandboxId: string,
): Promise<{ state: string; labels: Record<string, string> } | undefined> {
  const response = await fetch(
    `${standin.backendConfig().orchestratorEndpoint}/v1/sandboxes/${sandboxId}`,
    { headers: { authorization: `Bearer ${standin.token}` } },
  )
  if (response.status === 404) return undefined
  expect(response.status).toBe(200)
  return (await response.json()) as { state: string; labels: Record<string, string> }
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

/** The secret inside a credential (the microVM state is JSON inside the credential's secret). */
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

/** The credential of `credential`'s sandbox, relabelled as `sandboxId`'s. */
function relabelled(credential: string, sandboxId: string): string {
  const dot = credential.lastIndexOf('.')
  const fields = JSON.parse(Buffer.from(credential.slice(dot + 1), 'base64url').toString())
  fields.sandboxId = sandboxId
  return `${credential.slice(0, dot + 1)}${Buffer.from(JSON.stringify(fields)).toString('base64url')}`
}

describe('reconnect on the orchestrator stand-in', () => {
  let standin: TestOrchestratorStandin
  let store: string
  let provider: CordonSandboxProvider
  const makeProvider = (credentialStore: string | false) =>
    createMicroVMSandboxProvider({ backend: standin.backendConfig(), credentialStore })
  beforeAll(async () => {
    standin = await startTestOrchestrator()
    store = mkdtempSync(join(tmpdir(), 'cordon-microvm-credentials-'))
    provider = makeProvider(store)
  })
  /**
   * A detached guest created by another provider, paused and let go of,
   * once its end time (`cordon.expires`) has passed.
   */
  const leaveEndedPausedGuest = async (lifetimeMs: number) => {
    const other = makeProvider(false)
    const sandbox = await other.create({ detached: true, lifetimeMs })
    await sandbox.pause()
    await sandbox.disconnect()
    await other.close()
    const endsAt = Number((await describeGuest(standin, sandbox.id))!.labels[LABEL.expires])
    while (Date.now() < endsAt + 500) await sleep(250)
    return sandbox
  }
  afterAll(async () => {
    await provider?.close()
    rmSync(store, { recursive: true, force: true })
    await standin?.close()
  })

  it('a detached sandbox outlives the process that made it; this process connects by id, reads its file, lists it, and destroys it', async () => {
    const { stdout } = await run(process.execPath, [creator], {
      env: {
        ...process.env,
        CORDON_TEST_ENDPOINT: standin.backendConfig().orchestratorEndpoint,
        CORDON_TEST_TOKEN: standin.token,
        CORDON_TEST_STORE: store,
        CORDON_TEST_TEXT: 'left by another process',
      },
      timeout: 120_000,
    })
    const id = /sandbox (sbx_\w+)/.exec(stdout)?.[1]
    expect(id, stdout).toBeDefined()
    // The creator has exited (closing its provider): the guest runs on, its credential kept here.
    const guest = (await describeGuest(standin, id!))!
    expect(guest.state).toBe('running')
    expect(guest.labels[LABEL.detached]).toBe('1')
    const credentialFile = join(store, `${id}.json`)
    expect(existsSync(credentialFile)).toBe(true)
    // The creator's end time (sandbox.endsAt, kept with its credential) is the one the label holds.
    expect(JSON.parse(readFileSync(credentialFile, 'utf8')).endsAt).toBe(
      Number(guest.labels[LABEL.expires]),
    )
    // Nothing the control plane shows holds the secret.
    const secret = secretOf(JSON.parse(readFileSync(credentialFile, 'utf8')).credential)
    expect(JSON.stringify(guest)).not.toContain(secret)

    const sandbox = await provider.connect(id!)
    expect(sandbox.id).toBe(id)
    expect(sandbox.detached).toBe(true)
    expect(sandbox.endsAt).toBe(Number(guest.labels[LABEL.expires]))
    expect((await sandbox.readFile('note.txt')).toString()).toBe('left by another process')
    const said = await sandbox.exec('sh', ['-c', 'echo "$CREATOR_SAID" && pwd'])
    expect(said.stdout).toBe('hello from the creator\n/mnt/user-data/outputs/work\n')
    expect(sandbox.enforced.egress.kind).toBe('deny-all')
    expect(sandbox.enforced.limits.memoryLimitMb).toBeGreaterThan(0)

    // Listed: every detached guest and this provider's own, nobody else's.
    const own = await provider.create()
    const stranger = makeProvider(false)
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
      expect(listed!.createdAt).toBeGreaterThan(Date.now() - 300_000)
      expect(listed!.createdAt).toBeLessThanOrEqual(Date.now())
    } finally {
      await Promise.all([own.destroy(), stranger.close()])
    }

    await sandbox.destroy()
    expect(await describeGuest(standin, id!)).toBeUndefined()
    expect(existsSync(credentialFile)).toBe(false)
  }, 240_000)

  it('only a holder of the credential connects; unknown, destroyed and attached sandboxes are not found', async () => {
    const sandbox = await provider.create({ detached: true, lifetimeMs: 120_000 })
    const decoy = await provider.create({ detached: true, lifetimeMs: 120_000 })
    const other = makeProvider(false)
    try {
      const credential = sandbox.credential!
      const refused = await other
        .connect(sandbox.id, { credential: withWrongSecret(credential) })
        .catch((error: unknown) => error)
      expect(SandboxCredentialRefusedError.isInstance(refused)).toBe(true)
      expect((refused as Error).message).toMatch(/refused the credential/)
      // Another sandbox's real secret is refused too: only this sandbox's agent can tell.
      const borrowed = await other
        .connect(sandbox.id, { credential: relabelled(decoy.credential!, sandbox.id) })
        .catch((error: unknown) => error)
      expect(SandboxCredentialRefusedError.isInstance(borrowed)).toBe(true)
      const missing = await other.connect(sandbox.id).catch((error: unknown) => error)
      expect(SandboxCredentialRefusedError.isInstance(missing)).toBe(true)
      const unknownId = 'sbx_aaaaaaaaaaaaaaaaaaaaaaaaaa'
      const unknown = await other
        .connect(unknownId, { credential: relabelled(credential, unknownId) })
        .catch((error: unknown) => error)
      expect(SandboxNotFoundError.isInstance(unknown)).toBe(true)

      const reached = await other.connect(sandbox.id, { credential })
      expect((await reached.exec('echo', ['reached'])).stdout).toBe('reached\n')
      await reached.disconnect()
      expect((await sandbox.exec('echo', ['still mine'])).stdout).toBe('still mine\n')

      const attached = await provider.create()
      try {
        const notDetached = await other
          .connect(attached.id, { credential: relabelled(credential, attached.id) })
          .catch((error: unknown) => error)
        expect(SandboxNotFoundError.isInstance(notDetached)).toBe(true)
        expect((notDetached as Error).message).toMatch(/not created detached/)
      } finally {
        await attached.destroy()
      }
    } finally {
      await Promise.all([sandbox.destroy(), decoy.destroy()])
    }
    try {
      const gone = await other
        .connect(sandbox.id, { credential: sandbox.credential! })
        .catch((error: unknown) => error)
      expect(SandboxNotFoundError.isInstance(gone)).toBe(true)
    } finally {
      await other.close()
    }
  }, 240_000)

  it('a paused detached sandbox let go of is continued by connect; with no host left, the orchestrator ends it at its lifetime', async () => {
    const other = makeProvider(false)
    const sandbox = await other.create({ detached: true, lifetimeMs: 15_000 })
    const credential = sandbox.credential!
    await sandbox.writeFile('kept.txt', 'kept')
    await sandbox.pause()
    await sandbox.disconnect()
    await other.close()
    expect((await describeGuest(standin, sandbox.id))?.state).toBe('paused')
    const reached = await provider.connect(sandbox.id, { credential })
    expect((await describeGuest(standin, sandbox.id))?.state).toBe('running')
    expect((await reached.readFile('kept.txt')).toString()).toBe('kept')
    await reached.disconnect()
    // Nobody holds it: the orchestrator deletes the guest when its timeoutMs runs out.
    expect(
      await eventually(
        async () => (await describeGuest(standin, sandbox.id)) === undefined,
        90_000,
      ),
      'the guest ended at its lifetime',
    ).toBe(true)
    const ended = await provider
      .connect(sandbox.id, { credential })
      .catch((error: unknown) => error)
    expect(SandboxNotFoundError.isInstance(ended)).toBe(true)
  }, 180_000)
  it('a wrong credential leaves a paused detached guest paused', async () => {
    const other = makeProvider(false)
    const sandbox = await other.create({ detached: true, lifetimeMs: 60_000 })
    const credential = sandbox.credential!
    await sandbox.pause()
    await sandbox.disconnect()
    await other.close()
    const refused = await provider
      .connect(sandbox.id, { credential: withWrongSecret(credential) })
      .catch((error: unknown) => error)
    expect(SandboxCredentialRefusedError.isInstance(refused)).toBe(true)
    // Its owner paused it; a stranger's attempt does not run it.
    expect((await describeGuest(standin, sandbox.id))?.state).toBe('paused')
    const reached = await provider.connect(sandbox.id, { credential })
    expect((await describeGuest(standin, sandbox.id))?.state).toBe('running')
    await reached.destroy()
  }, 120_000)

  it("a detached guest left paused (whose lifetime the orchestrator does not count) is deleted past its end time by the next backend's sweep", async () => {
    const sandbox = await leaveEndedPausedGuest(6_000)
    // Past its end time, still there: paused time does not count toward timeoutMs.
    expect((await describeGuest(standin, sandbox.id))?.state).toBe('paused')
    // The sweep `cordon gc --microvm` runs, dry: it names the guest and deletes nothing.
    expect(
      await removeEndedDetachedMicroVMGuests(standin.backendConfig(), { dryRun: true }),
    ).toEqual([sandbox.id])
    expect((await describeGuest(standin, sandbox.id))?.state).toBe('paused')
    const next = makeProvider(false)
    try {
      // Its first list starts the sweep; a sweep that failed (a busy engine under the
      // stand-in) is started again by the next list, as by the next create or connect.
      expect(
        await eventually(async () => {
          await next.list()
          return (await describeGuest(standin, sandbox.id)) === undefined
        }, 90_000),
        "the new backend's sweep deleted the guest",
      ).toBe(true)
    } finally {
      await next.close()
    }
  }, 180_000)

  it('a sweep the control plane refused runs again at the next list, and deletes the ended paused guest', async () => {
    const sandbox = await leaveEndedPausedGuest(3_000)
    const front = await refusingFront(
      standin.backendConfig().orchestratorEndpoint,
      1,
      (method, url) =>
        method === 'GET' &&
        url.pathname === '/v1/sandboxes' &&
        url.searchParams.getAll('label').includes(`${LABEL.detached}=1`),
    )
    const next = createMicroVMSandboxProvider({
      backend: { ...standin.backendConfig(), orchestratorEndpoint: front.endpoint },
      credentialStore: false,
    })
    try {
      await next.list()
      expect(await eventually(async () => front.refused() === 1, 10_000)).toBe(true)
      await sleep(1_000)
      // The refused sweep deleted nothing, and nothing started it again by itself.
      expect((await describeGuest(standin, sandbox.id))?.state).toBe('paused')
      await next.list()
      expect(
        await eventually(
          async () => (await describeGuest(standin, sandbox.id)) === undefined,
          60_000,
        ),
        "the second list's sweep deleted the guest",
      ).toBe(true)
    } finally {
      await next.close()
      await front.close()
    }
  }, 120_000)
})
