import { ALL_CAPABILITIES, describeSandboxConformance } from '@cordon/conformance'
import { composeProvider, prepareProviderConfig } from '@cordon/core/backend'
import { afterAll, beforeAll } from 'vitest'
import { createBackend } from '../src/index.js'
import { startTestStandin } from './standin-fixture.js'

// The stand-in's guests are containers with real memory and pids limits and no
// network, so every capability is enforced by a kernel, not by promise.
let standin: Awaited<ReturnType<typeof startTestStandin>>
beforeAll(async () => {
  standin = await startTestStandin()
})
afterAll(async () => {
  await standin?.close()
})

describeSandboxConformance({
  name: 'microvm:self-hosted (orchestrator stand-in)',
  // The agent cannot allocate a pseudo-terminal and a guest has no engine to
  // ask; its usage is what the agent reads inside the guest (its cgroup included).
  // The orchestrator's control plane has no pause operation: pause is refused.
  capabilities: {
    ...ALL_CAPABILITIES,
    terminal: false,
    pause: false,
    measuredUsage: ALL_CAPABILITIES.measuredUsage,
  },
  createProvider: () => {
    const token = standin.token
    const prepared = prepareProviderConfig({
      backend: {
        tier: 'microvm',
        service: 'self-hosted',
        orchestratorEndpoint: standin.url,
        getToken: async () => token,
      },
    })
    return composeProvider({
      config: prepared.config,
      backendName: prepared.backendName,
      layout: prepared.layout,
      loadBackend: async (context) =>
        createBackend(prepared.config.backend as Parameters<typeof createBackend>[0], context),
    })
  },
})
