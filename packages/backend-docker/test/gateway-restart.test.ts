import { createServer, type Server } from 'node:http'
import type { AddressInfo } from 'node:net'
import type { CordonSandbox, CordonSandboxProvider } from '@cordon/core'
import { BUSYBOX_IMAGE, testRunLabels } from '@cordon/test-support'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { createDockerSandboxProvider } from '../src/index.js'
import { docker } from './test-run.js'

/** The host as a container on the default bridge reaches it. */
const HOST_BRIDGE_ADDRESS = '172.17.0.1'

describe.each(['docker', 'runsc'] as const)(
  'a gateway that dies is replaced without leaving sandboxes behind (Docker backend, %s)',
  (runtime) => {
    let server: Server
    let port: number
    let provider: CordonSandboxProvider

    const fetchUpstream = (sandbox: CordonSandbox, path: string) =>
      sandbox.exec('wget', ['-q', '-O', '-', `http://upstream.test:${port}${path}`], {
        timeout: 15_000,
      })

    /** Kills the gateway; the engine answers once the signal is sent, before the host has seen it go. */
    const startKillingGateway = () =>
      docker.getContainer(`cordon-gateway-${provider.instanceId}`).kill()

    const killGateway = async () => {
      const gateway = docker.getContainer(`cordon-gateway-${provider.instanceId}`)
      await gateway.kill()
      for (let attempt = 0; attempt < 100; attempt++) {
        const running = await gateway.inspect().then(
          (info) => info.State.Running,
          () => false,
        )
        if (!running) return
        await new Promise((resolve) => setTimeout(resolve, 100))
      }
      throw new Error('the gateway did not stop')
    }

    beforeAll(async () => {
      server = createServer((request, response) => response.end(`upstream saw ${request.url}\n`))
      port = await new Promise<number>((resolve) =>
        server.listen(0, '0.0.0.0', () => resolve((server.address() as AddressInfo).port)),
      )
      provider = createDockerSandboxProvider({
        backend: {
          tier: 'container',
          runtime,
          image: BUSYBOX_IMAGE,
          labels: testRunLabels(),
          gatewayHosts: { 'upstream.test': HOST_BRIDGE_ADDRESS, 'other.test': HOST_BRIDGE_ADDRESS },
          gatewayAllowedPorts: [port],
        },
        layout: { outputs: { source: { type: 'ephemeral' } } },
        allowInwardFor: ['upstream.test', 'other.test'],
      })
    })

    afterAll(async () => {
      await provider?.close()
      server?.close()
    })

    it('registers every live sandbox with the new gateway under its current policy', async () => {
      const first = await provider.create({ egress: { kind: 'static', allowedHosts: [] } })
      let second: CordonSandbox | undefined
      try {
        // The policy the new gateway must get is the current one, not the one at create.
        await first.setNetworkPolicy!({ allowedHosts: ['upstream.test'] })
        expect((await fetchUpstream(first, '/before')).stdout).toBe('upstream saw /before\n')

        await killGateway()
        // Its next connection brings a gateway back, with it registered.
        expect((await fetchUpstream(first, '/after-kill')).stdout).toBe(
          'upstream saw /after-kill\n',
        )
        const denied = await first.exec(
          'wget',
          ['-q', '-O', '-', `http://other.test:${port}/not-allowed`],
          { timeout: 15_000 },
        )
        expect(denied.exitCode).not.toBe(0)

        await killGateway()
        // A sandbox created after the death starts the new gateway; the old one is registered too.
        second = await provider.create({ egress: { kind: 'static', allowedHosts: ['other.test'] } })
        expect(
          (
            await second.exec('wget', ['-q', '-O', '-', `http://other.test:${port}/second`], {
              timeout: 15_000,
            })
          ).stdout,
        ).toBe('upstream saw /second\n')
        expect((await fetchUpstream(first, '/first-again')).stdout).toBe(
          'upstream saw /first-again\n',
        )
        expect(first.status).toBe('ready')
      } finally {
        await second?.destroy()
        await first.destroy()
      }
    })

    it('registers a sandbox created, or a policy set, while the gateway is dying', async () => {
      const first = await provider.create({ egress: { kind: 'static', allowedHosts: [] } })
      const created: CordonSandbox[] = []
      try {
        for (let round = 0; round < 3; round++) {
          // A registration sent in the moment between the kill and the host
          // seeing the gateway's stream end used to fail the call with
          // "the gateway exited" (seen under gVisor in CI).
          await startKillingGateway()
          const [sandbox] = await Promise.all([
            provider.create({ egress: { kind: 'static', allowedHosts: ['other.test'] } }),
            first.setNetworkPolicy!({
              allowedHosts: [round % 2 === 0 ? 'other.test' : 'upstream.test'],
            }),
          ])
          created.push(sandbox)
          expect(
            (
              await sandbox.exec('wget', ['-q', '-O', '-', `http://other.test:${port}/r${round}`], {
                timeout: 15_000,
              })
            ).stdout,
          ).toBe(`upstream saw /r${round}\n`)
        }
        // The last policy set during a death is the one the gateway holds.
        expect(
          (
            await first.exec('wget', ['-q', '-O', '-', `http://other.test:${port}/last`], {
              timeout: 15_000,
            })
          ).stdout,
        ).toBe('upstream saw /last\n')
        const denied = await fetchUpstream(first, '/not-any-more')
        expect(denied.exitCode).not.toBe(0)
      } finally {
        for (const sandbox of created) await sandbox.destroy()
        await first.destroy()
      }
    })
  },
)
