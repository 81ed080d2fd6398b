import { type ChildProcess, spawn } from 'node:child_process'
import { once } from 'node:events'
import { fileURLToPath } from 'node:url'
import { startTestOrchestrator, type TestOrchestratorStandin } from '@cordon/test-support'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { createMicroVMSandboxProvider, removeMicroVMGuestsOfGoneHosts } from '../src/index.js'

/**
 * A sandbox that is not detached ends with its host, as on the Docker
 * backend: the host holds its guest's agent (`hold-host`), and a guest no
 * host has held for `hostGoneGraceMs` is ended by its agent and removed by
 * the orchestrator (openapi.yaml, **Agent exit**). A detached one runs on.
 * A paused guest's agent is frozen and cannot end it: a sweep on the
 * machine the host ran on deletes the guests whose host has ended
 * (gone-owner-sweep.ts).
 */

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms))
const creator = fileURLToPath(new URL('./fixtures/attached-creator.mjs', import.meta.url))
/** Short, so the case is quick; the default (DEFAULT_HOST_GONE_GRACE_MS) is 30 s. */
const GRACE_MS = 2_000
/** Past the grace: the agent's close, the container's exit and the stand-in's removal. */
const REMOVAL_MARGIN_MS = 20_000

async function guestExists(standin: TestOrchestratorStandin, sandboxId: string): Promise<boolean> {
  const response = await fetch(
    `${standin.backendConfig().orchestratorEndpoint}/v1/sandboxes/${sandboxId}`,
    { headers: { authorization: `Bearer ${standin.token}` } },
  )
  if (response.status === 404) return false
  expect(response.status).toBe(200)
  return true
}

async function deleteGuest(standin: TestOrchestratorStandin, sandboxId: string): Promise<void> {
  await fetch(`${standin.backendConfig().orchestratorEndpoint}/v1/sandboxes/${sandboxId}`, {
    method: 'DELETE',
    headers: { authorization: `Bearer ${standin.token}` },
  })
}

/** Polls until the guest is gone; false if it is still there after `withinMs`. */
async function goneWithin(
  standin: TestOrchestratorStandin,
  sandboxId: string,
  withinMs: number,
): Promise<boolean> {
  const deadline = Date.now() + withinMs
  while (Date.now() < deadline) {
    if (!(await guestExists(standin, sandboxId))) return true
    await sleep(250)
  }
  return !(await guestExists(standin, sandboxId))
}

/** Starts the creator and resolves with its two sandbox ids once it has printed them. */
async function startCreator(
  standin: TestOrchestratorStandin,
  options: { pauseAttached?: boolean } = {},
): Promise<{ child: ChildProcess; attached: string; detached: string }> {
  const child = spawn(process.execPath, [creator], {
    env: {
      ...process.env,
      CORDON_TEST_ENDPOINT: standin.backendConfig().orchestratorEndpoint,
      CORDON_TEST_TOKEN: standin.token,
      CORDON_TEST_GRACE_MS: String(GRACE_MS),
      CORDON_TEST_PAUSE: options.pauseAttached ? '1' : '0',
    },
    stdio: ['ignore', 'pipe', 'pipe'],
  })
  let output = ''
  child.stdout!.on('data', (chunk: Buffer) => {
    output += chunk.toString()
  })
  child.stderr!.on('data', (chunk: Buffer) => {
    output += chunk.toString()
  })
  const deadline = Date.now() + 120_000
  while (!/sandboxes (sbx_\w+) (sbx_\w+)/.test(output)) {
    if (child.exitCode !== null || Date.now() > deadline) {
      child.kill('SIGKILL')
      throw new Error(`the creator printed no sandboxes: ${output}`)
    }
    await sleep(100)
  }
  const [, attached, detached] = /sandboxes (sbx_\w+) (sbx_\w+)/.exec(output)!
  return { child, attached: attached!, detached: detached! }
}

describe('a host that is killed, on the orchestrator stand-in', () => {
  let standin: TestOrchestratorStandin
  beforeAll(async () => {
    standin = await startTestOrchestrator()
  })
  afterAll(async () => {
    await standin?.close()
  })

  it('a sandbox that is not detached is removed within the grace once its host is SIGKILLed; a detached one runs on', async () => {
    const { child, attached, detached } = await startCreator(standin)
    try {
      // A host that lives keeps its guest past the grace.
      await sleep(GRACE_MS * 2)
      expect(await guestExists(standin, attached)).toBe(true)

      child.kill('SIGKILL')
      await once(child, 'exit')
      expect(await goneWithin(standin, attached, GRACE_MS + REMOVAL_MARGIN_MS)).toBe(true)
      // The detached one is its lifetime's (180 s), not its creator's.
      expect(await guestExists(standin, detached)).toBe(true)
    } finally {
      child.kill('SIGKILL')
      await deleteGuest(standin, attached)
      await deleteGuest(standin, detached)
    }
  })

  it("a host killed while its sandbox is paused leaves a frozen guest, which a sweep on this machine deletes; a live host's paused guest and a detached one are kept", async () => {
    const { child, attached, detached } = await startCreator(standin, { pauseAttached: true })
    const provider = createMicroVMSandboxProvider({
      backend: { ...standin.backendConfig(), hostGoneGraceMs: GRACE_MS },
      credentialStore: false,
    })
    try {
      const own = await provider.create({ lifetimeMs: 180_000 })
      await own.pause()
      child.kill('SIGKILL')
      await once(child, 'exit')
      // Its agent is frozen, so it cannot end itself, and paused time does not count.
      await sleep(GRACE_MS * 3)
      expect(await guestExists(standin, attached)).toBe(true)
      const sweep = () => removeMicroVMGuestsOfGoneHosts(standin.backendConfig())
      expect(
        await removeMicroVMGuestsOfGoneHosts(standin.backendConfig(), { dryRun: true }),
      ).toEqual([attached])
      expect(await guestExists(standin, attached)).toBe(true)
      expect(await sweep()).toEqual([attached])
      expect(await guestExists(standin, attached)).toBe(false)
      expect(await guestExists(standin, own.id)).toBe(true)
      expect(await guestExists(standin, detached)).toBe(true)
      expect(await sweep()).toEqual([])
      await own.resume()
      expect((await own.exec('echo', ['still here'])).stdout).toBe('still here\n')
      await own.destroy()
    } finally {
      child.kill('SIGKILL')
      await provider.close()
      await deleteGuest(standin, attached)
      await deleteGuest(standin, detached)
    }
  })

  it("a provider's first create, connect or list runs that sweep in the background", async () => {
    const { child, attached, detached } = await startCreator(standin, { pauseAttached: true })
    try {
      child.kill('SIGKILL')
      await once(child, 'exit')
      const provider = createMicroVMSandboxProvider({
        backend: standin.backendConfig(),
        credentialStore: false,
      })
      try {
        await provider.list()
        expect(await goneWithin(standin, attached, REMOVAL_MARGIN_MS)).toBe(true)
        expect(await guestExists(standin, detached)).toBe(true)
      } finally {
        await provider.close()
      }
    } finally {
      child.kill('SIGKILL')
      await deleteGuest(standin, attached)
      await deleteGuest(standin, detached)
    }
  })

  it('a host that lives keeps its sandbox through a pause longer than the grace', async () => {
    const provider = createMicroVMSandboxProvider({
      backend: { ...standin.backendConfig(), hostGoneGraceMs: GRACE_MS },
      credentialStore: false,
    })
    try {
      const sandbox = await provider.create({ lifetimeMs: 180_000 })
      await sandbox.pause()
      await sleep(GRACE_MS * 2)
      await sandbox.resume()
      // Past the grace again, running: the host's hold came back in time.
      await sleep(GRACE_MS * 2)
      expect(await guestExists(standin, sandbox.id)).toBe(true)
      expect((await sandbox.exec('echo', ['still here'])).stdout).toBe('still here\n')
      await sandbox.destroy()
    } finally {
      await provider.close()
    }
  })
})
