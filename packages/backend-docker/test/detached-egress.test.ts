/**
 * Proxied egress of a detached sandbox: enforced by the gateway of whichever
 * host holds the sandbox, refused while none does. The sandbox is made by
 * another Node process, which exits; this process connects to it.
 */
import { spawn } from 'node:child_process'
import { once } from 'node:events'
import { mkdtempSync, rmSync } from 'node:fs'
import { createServer, type Server } from 'node:http'
import type { AddressInfo } from 'node:net'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { fileURLToPath } from 'node:url'
import {
  type CordonSandboxProvider,
  SandboxControlRefusedError,
  SandboxCredentialRefusedError,
  type SandboxEgressEvent,
  type SandboxEvent,
} from '@cordon/core'
import { containerTestBackend, EPHEMERAL_OUTPUTS } from '@cordon/test-support'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { createDockerSandboxProvider } from '../src/index.js'
import { createInChildProcess } from './detached-creator.js'
import { engineExec } from './engine-exec.js'
import { docker } from './test-run.js'

const holder = fileURLToPath(new URL('./fixtures/detached-holder.mjs', import.meta.url))

/** The host as a container on the default bridge reaches it (the gateway's network). */
const HOST_BRIDGE_ADDRESS = '172.17.0.1'

/**
 * Runs `wget` through the sandbox's proxy port from inside its container,
 * with the engine's exec, not through cordon's agent: what a process of the
 * sandbox gets whether or not a host holds it.
 */
async function wgetFromInside(
  sandboxId: string,
  url: string,
): Promise<{ exitCode: number; output: string }> {
  // No -T: this busybox's wget crashes with it (SIGSEGV), which would pass for a refusal.
  return engineExec(`cordon-${sandboxId}`, ['wget', '-O', '-', url], {
    user: '65534:65534',
    env: ['http_proxy=http://127.0.0.1:3128'],
  })
}

for (const runtime of ['docker', 'runsc'] as const) {
  describe(`egress of a detached sandbox (${runtime})`, () => {
    const seen: string[] = []
    const events: SandboxEvent[] = []
    let upstream: Server
    let port: number
    let store: string
    let provider: CordonSandboxProvider
    const gateway = () => ({
      gatewayHosts: { 'upstream.test': HOST_BRIDGE_ADDRESS, 'elsewhere.test': HOST_BRIDGE_ADDRESS },
      gatewayAllowedPorts: [port],
    })
    const makeProvider = (onEvent?: (event: SandboxEvent) => void) =>
      createDockerSandboxProvider({
        backend: { ...containerTestBackend({ runtime }), ...gateway() },
        layout: EPHEMERAL_OUTPUTS,
        credentialStore: store,
        allowInwardFor: ['upstream.test', 'elsewhere.test'],
        ...(onEvent ? { onEvent } : {}),
      })
    const egressEvents = () =>
      events.filter((event): event is SandboxEgressEvent => event.type === 'egress')
    const eventFor = async (match: (event: SandboxEgressEvent) => boolean) => {
      for (let attempt = 0; attempt < 100; attempt++) {
        const found = egressEvents().find(match)
        if (found) return found
        await new Promise((resolve) => setTimeout(resolve, 50))
      }
      return undefined
    }

    beforeAll(async () => {
      store = mkdtempSync(join(tmpdir(), 'cordon-credentials-'))
      upstream = createServer((request, response) => {
        seen.push(request.url ?? '')
        response.end(`upstream saw ${request.url}\n`)
      })
      port = await new Promise<number>((resolve) =>
        upstream.listen(0, '0.0.0.0', () => resolve((upstream.address() as AddressInfo).port)),
      )
      provider = makeProvider((event) => events.push(event))
    })
    afterAll(async () => {
      await provider?.close()
      upstream?.close()
      rmSync(store, { recursive: true, force: true })
    })

    it('is refused while no host holds it, enforced by the gateway of the host that connects, and refused again once that host lets go', async () => {
      const { id } = await createInChildProcess(runtime, {
        CORDON_TEST_DETACHED: '1',
        CORDON_TEST_STORE: store,
        CORDON_TEST_EGRESS: JSON.stringify({ allowedHosts: ['upstream.test'], ...gateway() }),
      })
      // (a) The creator has exited with its gateway: a connection through the proxy goes nowhere.
      const unheld = await wgetFromInside(id, `http://upstream.test:${port}/unheld`)
      // wget's own failure (1): the proxy port took the connection and closed it unanswered.
      expect(unheld.exitCode).toBe(1)
      expect(unheld.output).toMatch(/error getting response|connection reset|closed/i)
      expect(seen).not.toContain('/unheld')

      // (b) This host connects: the policy the creator set, at this provider's gateway.
      const sandbox = await provider.connect(id)
      try {
        expect(sandbox.enforced.egress).toEqual({
          kind: 'static',
          allowedHosts: ['upstream.test'],
        })
        const allowed = await sandbox.exec(
          'wget',
          ['-q', '-O', '-', `http://upstream.test:${port}/allowed`],
          { timeout: 20_000 },
        )
        expect(allowed.stdout).toBe('upstream saw /allowed\n')
        expect(
          await eventFor((event) => event.sandboxId === id && event.decision === 'allow'),
        ).toMatchObject({ sandboxId: id, host: 'upstream.test', port, decision: 'allow' })
        // A process the engine starts in the sandbox gets the same.
        const inside = await wgetFromInside(id, `http://upstream.test:${port}/inside`)
        expect(inside.exitCode).toBe(0)
        expect(inside.output).toContain('upstream saw /inside\n')
        const denied = await sandbox.exec(
          'wget',
          ['-q', '-O', '-', `http://elsewhere.test:${port}/denied`],
          { timeout: 20_000 },
        )
        expect(denied.exitCode).not.toBe(0)
        expect(denied.stderr).toContain('403')
        expect(seen).not.toContain('/denied')
        expect(
          await eventFor((event) => event.sandboxId === id && event.decision === 'deny'),
        ).toMatchObject({ host: 'elsewhere.test', reason: 'host-not-allowed' })
        // No way around the proxy: the sandbox has no network of its own.
        const direct = await sandbox.exec(
          'sh',
          [
            '-c',
            `unset http_proxy HTTP_PROXY; wget -O - http://${HOST_BRIDGE_ADDRESS}:${port}/direct`,
          ],
          { timeout: 20_000 },
        )
        expect(direct.exitCode).toBe(1)
        expect(direct.stderr).toMatch(/unreachable|can't connect/i)
        expect(seen).not.toContain('/direct')
        // The policy stays the one the creator set, which the next host enforces too.
        expect(sandbox.setNetworkPolicy).toBeUndefined()

        // One host holds its egress at a time: another is refused while this one does.
        const other = makeProvider()
        try {
          const refused = await other.connect(id).catch((error: unknown) => error)
          expect(SandboxControlRefusedError.isInstance(refused)).toBe(true)
          expect((refused as SandboxControlRefusedError).control).toBe('egress')
          expect((refused as Error).message).toMatch(/another host holds/)
        } finally {
          await other.close()
        }
        // This provider a second time likewise, and its first hold is untouched by the refusal.
        const twice = await provider.connect(id).catch((error: unknown) => error)
        expect(SandboxControlRefusedError.isInstance(twice)).toBe(true)
        expect((twice as SandboxControlRefusedError).control).toBe('egress')
        expect((twice as Error).message).toMatch(/holds the sandbox's egress already/)
        expect(
          (await sandbox.exec('wget', ['-q', '-O', '-', `http://upstream.test:${port}/still`]))
            .stdout,
        ).toBe('upstream saw /still\n')

        // (c) This host lets go: refused again, though the sandbox runs on.
        await sandbox.disconnect()
        const released = await wgetFromInside(id, `http://upstream.test:${port}/released`)
        // wget's own failure (1): the proxy port took the connection and closed it unanswered.
        expect(released.exitCode).toBe(1)
        expect(released.output).toMatch(/error getting response|connection reset|closed/i)
        expect(seen).not.toContain('/released')
        // Held again, by the host that let go: the agent's session was free again.
        const again = await provider.connect(id)
        expect(
          (await again.exec('wget', ['-q', '-O', '-', `http://upstream.test:${port}/again`]))
            .stdout,
        ).toBe('upstream saw /again\n')
        await again.destroy()
      } finally {
        await docker
          .getContainer(`cordon-${id}`)
          .remove({ force: true })
          .catch(() => {})
      }
    }, 300_000)

    it('a credential whose policy is not one a gateway enforces is refused before anything is dialled', async () => {
      const sandboxId = 'sbx_aaaaaaaaaaaaaaaaaaaaaaaaaa'
      for (const egress of [{ kind: 'resolver' }, { kind: 'static', allowedHosts: ['*'] }]) {
        const state = {
          secret: 'x'.repeat(43),
          env: {},
          workingDirectory: '/mnt/user-data/outputs',
          egress,
        }
        const fields = {
          sandboxId,
          backend: provider.backend,
          secret: JSON.stringify(state),
          endsAt: Date.now() + 60_000,
        }
        const credential = `cordon-credential-v1.${Buffer.from(JSON.stringify(fields)).toString('base64url')}`
        const refused = await provider
          .connect(sandboxId, { credential })
          .catch((error: unknown) => error)
        expect(SandboxCredentialRefusedError.isInstance(refused), JSON.stringify(egress)).toBe(true)
      }
    })

    it('its creator holds it until it lets go, cannot change its policy (the next host would not keep the change), and gets it back by connecting', async () => {
      const sandbox = await provider.create({
        detached: true,
        lifetimeMs: 120_000,
        egress: { kind: 'static', allowedHosts: ['upstream.test'] },
      })
      try {
        expect(
          (await sandbox.exec('wget', ['-q', '-O', '-', `http://upstream.test:${port}/creator`]))
            .stdout,
        ).toBe('upstream saw /creator\n')
        const change = await sandbox.setNetworkPolicy!({ allowedHosts: ['elsewhere.test'] }).catch(
          (error: unknown) => error,
        )
        expect(SandboxControlRefusedError.isInstance(change)).toBe(true)
        expect((change as SandboxControlRefusedError).control).toBe('setNetworkPolicy')
        expect((change as Error).message).toMatch(/keeps the policy it was created with/)
        await sandbox.disconnect()
        const unheld = await wgetFromInside(sandbox.id, `http://upstream.test:${port}/let-go`)
        // wget's own failure (1): the proxy port took the connection and closed it unanswered.
        expect(unheld.exitCode).toBe(1)
        expect(unheld.output).toMatch(/error getting response|connection reset|closed/i)
        expect(seen).not.toContain('/let-go')
        const again = await provider.connect(sandbox.id)
        expect(
          (await again.exec('wget', ['-q', '-O', '-', `http://upstream.test:${port}/back`])).stdout,
        ).toBe('upstream saw /back\n')
        await again.destroy()
      } finally {
        await docker
          .getContainer(`cordon-${sandbox.id}`)
          .remove({ force: true })
          .catch(() => {})
      }
    }, 300_000)

    it("a resolver's answer at create is what a host that connects enforces (its closure stays with the creator, not asked again), and allow-all stays allow-all", async () => {
      let asked = 0
      const resolved = await provider.create({
        detached: true,
        lifetimeMs: 120_000,
        egress: {
          kind: 'resolver',
          resolve: async () => {
            asked += 1
            return ['upstream.test']
          },
        },
      })
      const open = await provider.create({
        detached: true,
        lifetimeMs: 120_000,
        egress: { kind: 'allow-all' },
      })
      const next = makeProvider()
      try {
        await resolved.disconnect()
        await open.disconnect()
        const askedAtCreate = asked
        expect(askedAtCreate).toBeGreaterThan(0)

        const held = await next.connect(resolved.id)
        const allowed = await held.exec('wget', [
          '-q',
          '-O',
          '-',
          `http://upstream.test:${port}/resolved-then-connected`,
        ])
        expect(allowed.stdout).toBe('upstream saw /resolved-then-connected\n')
        const denied = await held.exec('wget', [
          '-q',
          '-O',
          '-',
          `http://elsewhere.test:${port}/not-resolved`,
        ])
        expect(denied.stderr).toContain('403')
        expect(seen).not.toContain('/not-resolved')
        expect(asked).toBe(askedAtCreate)
        await held.destroy()

        const opened = await next.connect(open.id)
        const anywhere = await opened.exec('wget', [
          '-q',
          '-O',
          '-',
          `http://elsewhere.test:${port}/allow-all-then-connected`,
        ])
        expect(anywhere.stdout).toBe('upstream saw /allow-all-then-connected\n')
        await opened.destroy()
      } finally {
        await next.close()
        for (const id of [resolved.id, open.id])
          await docker
            .getContainer(`cordon-${id}`)
            .remove({ force: true })
            .catch(() => {})
      }
    }, 300_000)

    it('a host that dies holding it (SIGKILL) lets go with its connection: the next host connects and its egress works', async () => {
      const settings = JSON.stringify({ allowedHosts: ['upstream.test'], ...gateway() })
      const { id } = await createInChildProcess(runtime, {
        CORDON_TEST_DETACHED: '1',
        CORDON_TEST_STORE: store,
        CORDON_TEST_EGRESS: settings,
      })
      try {
        const child = spawn(process.execPath, [holder], {
          env: {
            ...process.env,
            CORDON_TEST_RUNTIME: runtime,
            CORDON_TEST_STORE: store,
            CORDON_TEST_EGRESS: settings,
            CORDON_TEST_SANDBOX: id,
          },
          stdio: ['ignore', 'pipe', 'inherit'],
        })
        let printed = ''
        child.stdout!.on('data', (chunk: Buffer) => {
          printed += chunk.toString()
        })
        const exited = once(child, 'exit')
        while (!printed.includes('held')) {
          if (child.exitCode !== null) throw new Error(`the holder exited: ${printed}`)
          await new Promise((resolve) => setTimeout(resolve, 100))
        }
        // Held there: refused here.
        const refused = await provider.connect(id).catch((error: unknown) => error)
        expect((refused as Error).message).toMatch(/another host holds/)
        child.kill('SIGKILL')
        await exited
        // Its connection ends with it (the engine's exec, under gVisor, a moment later).
        let sandbox: Awaited<ReturnType<CordonSandboxProvider['connect']>> | undefined
        for (let attempt = 0; attempt < 60 && !sandbox; attempt++) {
          sandbox = await provider.connect(id).catch(async (error: unknown) => {
            if (!/another host holds/.test((error as Error).message)) throw error
            await new Promise((resolve) => setTimeout(resolve, 500))
            return undefined
          })
        }
        expect(sandbox).toBeDefined()
        expect(
          (await sandbox!.exec('wget', ['-q', '-O', '-', `http://upstream.test:${port}/after`]))
            .stdout,
        ).toBe('upstream saw /after\n')
        await sandbox!.destroy()
      } finally {
        await docker
          .getContainer(`cordon-${id}`)
          .remove({ force: true })
          .catch(() => {})
      }
    }, 300_000)
  })
}
