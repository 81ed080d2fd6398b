import { describe, expect, it } from 'vitest'
import {
  createSandboxProvider,
  SandboxBackendNotInstalledError,
  SandboxError,
  SandboxTransportError,
  VsockAgentTransport,
} from '../src/index.js'

/**
 * The umbrella loads each real backend package lazily and hands it the
 * validated config: a create against a control plane that is not there fails
 * inside the backend with one of cordon's typed errors, never a missing-package
 * error.
 */
describe('loading the real backend packages', () => {
  it('loads @cordon/backend-microvm for the microvm tier', async () => {
    const provider = createSandboxProvider({
      backend: {
        tier: 'microvm',
        service: 'self-hosted',
        orchestratorEndpoint: 'http://127.0.0.1:9/',
        getToken: async () => 'token',
        readyTimeoutMs: 2000,
      },
    })
    const error = await provider.create().catch((caught: unknown) => caught)
    expect(SandboxError.isInstance(error)).toBe(true)
    expect(SandboxBackendNotInstalledError.isInstance(error)).toBe(false)
    await provider.close()
  })

  it("fronts the backend's VsockAgentTransport: healthz() a boolean, health() the reason", async () => {
    const transport = new VsockAgentTransport(
      { kind: 'unix', path: '/nonexistent/cordon-agent.sock' },
      { secret: 'a-secret-of-twenty-characters', maxConnectAttempts: 1 },
    )
    expect(await transport.healthz()).toBe(false)
    const error = await transport.health().catch((caught: unknown) => caught)
    expect(SandboxTransportError.isInstance(error)).toBe(true)
  })

  it('loads @cordon/backend-aci for the aci-standby-pool runtime', async () => {
    const provider = createSandboxProvider({
      backend: {
        tier: 'container',
        runtime: 'aci-standby-pool',
        subscriptionId: 'sub',
        resourceGroup: 'rg',
        location: 'westeurope',
        standbyPoolResourceId:
          '/subscriptions/sub/resourceGroups/rg/providers/Microsoft.StandbyPool/standbyContainerGroupPools/pool',
        containerGroupProfileResourceId:
          '/subscriptions/sub/resourceGroups/rg/providers/Microsoft.ContainerInstance/containerGroupProfiles/profile',
        getArmToken: async () => 'token',
        subnetId:
          '/subscriptions/sub/resourceGroups/rg/providers/Microsoft.Network/virtualNetworks/vnet/subnets/sandboxes',
        armEndpoint: 'http://127.0.0.1:9/',
        readyTimeoutMs: 2000,
      },
      layout: { outputs: { source: { type: 'inImage' } } },
    })
    const error = await provider.create().catch((caught: unknown) => caught)
    expect(SandboxError.isInstance(error)).toBe(true)
    expect(SandboxBackendNotInstalledError.isInstance(error)).toBe(false)
    await provider.close()
  })
})
