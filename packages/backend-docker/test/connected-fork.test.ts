/**
 * A sandbox reached with `connect()` is forked as its creator's handle
 * forks it: the forks get the environment, limits, egress policy, exec
 * timeout and lifetime the creator's create asked for, which reach this
 * process only in the credential (none of it is on the engine, where the
 * environment's secrets would show). The sandbox is made by another Node
 * process, which exits; this process connects to it and forks it.
 */
import { mkdtempSync, rmSync } from 'node:fs'
import { createServer, type Server } from 'node:http'
import type { AddressInfo } from 'node:net'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import type { CordonSandbox, CordonSandboxProvider } from '@cordon/core'
import { containerTestBackend, EPHEMERAL_OUTPUTS } from '@cordon/test-support'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import {
  AGENT_MEMORY_ALLOWANCE_MB,
  GVISOR_KERNEL_MEMORY_ALLOWANCE_MB,
} from '../src/container-spec.js'
import { createDockerSandboxProvider } from '../src/index.js'
import { createInChildProcess } from './detached-creator.js'
import { memoryCgroupOf } from './memory-cgroup.js'
import { docker } from './test-run.js'

/** The host as a container on the default bridge reaches it (the gateway's network). */
const HOST_BRIDGE_ADDRESS = '172.17.0.1'
const MiB = 1024 * 1024

/** What the creator's create asks for, none of it a default of either provider. */
const CREATED = { memoryLimitMb: 160, maxProcesses: 48, timeoutMs: 4_000, lifetimeMs: 150_000 }

for (const runtime of ['docker', 'runsc'] as const) {
  describe(`a fork of a connected sandbox (${runtime})`, () => {
    const seen: string[] = []
    let upstream: Server
    let port: number
    let store: string
    let provider: CordonSandboxProvider
    const gateway = () => ({
      gatewayHosts: { 'upstream.test': HOST_BRIDGE_ADDRESS, 'elsewhere.test': HOST_BRIDGE_ADDRESS },
      gatewayAllowedPorts: [port],
    })

    beforeAll(async () => {
      store = mkdtempSync(join(tmpdir(), 'cordon-credentials-'))
      upstream = createServer((request, response) => {
        seen.push(request.url ?? '')
        response.end(`upstream saw ${request.url}\n`)
      })
      port = await new Promise<number>((resolve) =>
        upstream.listen(0, '0.0.0.0', () => resolve((upstream.address() as AddressInfo).port)),
      )
      provider = createDockerSandboxProvider({
        backend: { ...containerTestBackend({ runtime }), ...gateway() },
        layout: EPHEMERAL_OUTPUTS,
        credentialStore: store,
        allowInwardFor: ['upstream.test', 'elsewhere.test'],
      })
    })
    afterAll(async () => {
      await provider?.close()
      upstream?.close()
      rmSync(store, { recursive: true, force: true })
    })

    it("has the creator's environment, limits, egress policy, exec timeout and lifetime, as a fork from the creator's handle does", async () => {
      const { id } = await createInChildProcess(runtime, {
        CORDON_TEST_DETACHED: '1',
        CORDON_TEST_STORE: store,
        CORDON_TEST_EGRESS: JSON.stringify({ allowedHosts: ['upstream.test'], ...gateway() }),
        CORDON_TEST_MEMORY_MB: String(CREATED.memoryLimitMb),
        CORDON_TEST_MAX_PROCESSES: String(CREATED.maxProcesses),
        CORDON_TEST_TIMEOUT_MS: String(CREATED.timeoutMs),
        CORDON_TEST_LIFETIME_MS: String(CREATED.lifetimeMs),
      })
      const sandbox = await provider.connect(id)
      let fork: CordonSandbox | undefined
      try {
        // The connected handle times commands with the creator's timeout, not this provider's default.
        expect(sandbox.enforced.execTimeoutMs).toBe(CREATED.timeoutMs)
        ;[fork] = await sandbox.fork({ count: 1 })
        const made = fork!
        expect(made.enforced).toMatchObject({
          execTimeoutMs: CREATED.timeoutMs,
          lifetimeMs: CREATED.lifetimeMs,
          egress: { kind: 'static', allowedHosts: ['upstream.test'] },
          limits: { memoryLimitMb: CREATED.memoryLimitMb, maxProcesses: CREATED.maxProcesses },
        })
        // Each seen from inside the fork, or from its container's cgroup on the host.
        const slow = { timeout: 30_000 }
        expect((await made.exec('sh', ['-c', 'echo "$CREATOR_SAID"'], slow)).stdout).toBe(
          'hello from the creator\n',
        )
        expect((await made.exec('sh', ['-c', 'ulimit -u'], slow)).stdout.trim()).toBe(
          String(CREATED.maxProcesses),
        )
        const info = await docker.getContainer(`cordon-${made.id}`).inspect()
        expect(memoryCgroupOf(info.State.Pid).limit()).toBe(
          (CREATED.memoryLimitMb +
            AGENT_MEMORY_ALLOWANCE_MB +
            (runtime === 'runsc' ? GVISOR_KERNEL_MEMORY_ALLOWANCE_MB : 0)) *
            MiB,
        )
        const allowed = await made.exec(
          'wget',
          ['-q', '-O', '-', `http://upstream.test:${port}/fork-allowed`],
          slow,
        )
        expect(allowed.stdout).toBe('upstream saw /fork-allowed\n')
        const denied = await made.exec(
          'wget',
          ['-q', '-O', '-', `http://elsewhere.test:${port}/fork-denied`],
          slow,
        )
        expect(denied.exitCode).not.toBe(0)
        expect(denied.stderr).toContain('403')
        expect(seen).not.toContain('/fork-denied')
        // A command that names no timeout is ended at the creator's.
        const started = Date.now()
        const sleeper = await made.exec('sleep', ['60'])
        expect(sleeper.timedOut).toBe(true)
        expect(Date.now() - started).toBeLessThan(30_000)
      } finally {
        await fork?.destroy()
        await sandbox.destroy()
      }
    }, 300_000)
  })
}
