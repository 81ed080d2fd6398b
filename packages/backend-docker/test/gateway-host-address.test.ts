import { execFileSync } from 'node:child_process'
import { createServer, type Server } from 'node:http'
import type { AddressInfo } from 'node:net'
import { networkInterfaces } from 'node:os'
import type {
  CordonSandbox,
  CordonSandboxProvider,
  EgressPolicy,
  SandboxEgressEvent,
  SandboxEvent,
} from '@cordon/core'
import { BUSYBOX_IMAGE, testRunLabels } from '@cordon/test-support'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { createDockerSandboxProvider } from '../src/index.js'

/**
 * The Docker host accepts packets for any of its own addresses, public ones
 * included, from a container on its bridge. The gateway must refuse every one
 * of them, as a standalone proxy refuses its own machine's. The address is
 * public (in no range the egress screen refuses by class), added to the
 * host's loopback for this test only and removed in `afterAll`.
 */
const HOST_ONLY_ADDRESS = `11.22.33.${100 + Math.floor(Math.random() * 100)}`

function hasAddress(address: string): boolean {
  return Object.values(networkInterfaces()).some((entries) =>
    (entries ?? []).some((entry) => entry.address === address),
  )
}

/** A raw CONNECT through the sandbox's proxy, from inside the sandbox. */
async function connectThroughProxy(sandbox: CordonSandbox, target: string): Promise<string> {
  // busybox nc stops reading the reply once its stdin ends, so stdin stays open a moment.
  const result = await sandbox.exec('sh', ['-c', '(cat; sleep 1.5) | nc -w 3 127.0.0.1 3128'], {
    stdin: `CONNECT ${target} HTTP/1.1\r\nHost: ${target}\r\n\r\nGET /leak HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n`,
    timeout: 15_000,
  })
  return result.stdout
}

describe("the gateway refuses the Docker host's own addresses (Docker backend)", () => {
  const events: SandboxEvent[] = []
  let reached = 0
  let server: Server
  let port: number
  let addressAdded = false
  const providers: CordonSandboxProvider[] = []

  const provider = (runtime: 'docker' | 'runsc'): CordonSandboxProvider => {
    const created = createDockerSandboxProvider({
      backend: {
        tier: 'container',
        runtime,
        image: BUSYBOX_IMAGE,
        labels: testRunLabels(),
        gatewayAllowedPorts: [port],
      },
      layout: { outputs: { source: { type: 'ephemeral' } } },
      onEvent: (event) => events.push(event),
    })
    providers.push(created)
    return created
  }

  const addAddress = () => {
    expect(hasAddress(HOST_ONLY_ADDRESS)).toBe(false)
    addressAdded = true
    execFileSync('ip', ['addr', 'add', `${HOST_ONLY_ADDRESS}/32`, 'dev', 'lo'])
  }

  const expectRefused = async (sandbox: CordonSandbox) => {
    const target = `${HOST_ONLY_ADDRESS}:${port}`
    const before = reached
    const eventsBefore = events.length
    const reply = await connectThroughProxy(sandbox, target)
    expect(reply, target).toMatch(/^HTTP\/1\.1 403/)
    expect(reply.toLowerCase()).toContain('x-cordon-egress-denied: address-proxy-self')
    expect(reached).toBe(before)
    let event: SandboxEgressEvent | undefined
    for (let attempt = 0; attempt < 200 && !event; attempt++) {
      event = events
        .slice(eventsBefore)
        .find(
          (candidate): candidate is SandboxEgressEvent =>
            candidate.type === 'egress' &&
            candidate.sandboxId === sandbox.id &&
            candidate.host === HOST_ONLY_ADDRESS,
        )
      if (!event) await new Promise((resolve) => setTimeout(resolve, 50))
    }
    expect(event).toMatchObject({ decision: 'deny', reason: 'address-proxy-self' })
  }

  const withSandbox = async (
    from: CordonSandboxProvider,
    egress: EgressPolicy,
    use: (sandbox: CordonSandbox) => Promise<void>,
  ) => {
    const sandbox = await from.create({ egress })
    try {
      await use(sandbox)
    } finally {
      await sandbox.destroy()
    }
  }

  beforeAll(async () => {
    server = createServer((_request, response) => {
      reached++
      response.end('host-only service\n')
    })
    port = await new Promise<number>((resolve) =>
      server.listen(0, '0.0.0.0', () => resolve((server.address() as AddressInfo).port)),
    )
  })

  afterAll(async () => {
    // First, so nothing that follows can leave the address on the host.
    if (addressAdded) execFileSync('ip', ['addr', 'del', `${HOST_ONLY_ADDRESS}/32`, 'dev', 'lo'])
    for (const each of providers) await each.close()
    server?.close()
  })

  it('refuses an address the host gains while the gateway runs, under allow-all and a static policy naming it (runc)', async () => {
    const runc = provider('docker')
    await withSandbox(runc, { kind: 'allow-all' }, async (sandbox) => {
      // The gateway is up before the host has the address: it learns of it.
      addAddress()
      // The service is reachable through it from the host itself.
      expect(await (await fetch(`http://${HOST_ONLY_ADDRESS}:${port}/`)).text()).toBe(
        'host-only service\n',
      )
      // The host looks at its addresses every second and tells the gateway,
      // which a loaded machine can take longer over: asked until it refuses
      // (a try the gateway let through reached the service: counted, not judged).
      const target = `${HOST_ONLY_ADDRESS}:${port}`
      for (let tries = 0; tries < 10; tries++)
        if (/address-proxy-self/i.test(await connectThroughProxy(sandbox, target))) break
      await expectRefused(sandbox)
      await withSandbox(
        runc,
        { kind: 'static', allowedHosts: [HOST_ONLY_ADDRESS] },
        async (named) => await expectRefused(named),
      )
    })
  })

  it('refuses an address the host had when the gateway started, under allow-all and a static policy naming it (gVisor)', async () => {
    if (!addressAdded) addAddress()
    const runsc = provider('runsc')
    await withSandbox(runsc, { kind: 'allow-all' }, expectRefused)
    await withSandbox(runsc, { kind: 'static', allowedHosts: [HOST_ONLY_ADDRESS] }, expectRefused)
  })
})
