import { ALL_CAPABILITIES, describeSandboxConformance } from '@cordon/conformance'
import { startTestOrchestrator, type TestOrchestratorStandin } from '@cordon/test-support'
import { afterAll, beforeAll } from 'vitest'
import { createMicroVMSandboxProvider } from '../src/index.js'

// The stand-in's guests are containers with real memory and pids limits and no
// network, so every capability is enforced by a kernel, not by promise.
let standin: TestOrchestratorStandin
beforeAll(async () => {
  standin = await startTestOrchestrator()
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
    // A guest's kernel is its own: it does not see what the host does to shared files.
    externalWatch: false,
    measuredUsage: ALL_CAPABILITIES.measuredUsage,
  },
  createProvider: () => {
    return createMicroVMSandboxProvider({ backend: standin.backendConfig() })
  },
})
