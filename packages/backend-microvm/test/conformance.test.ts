import { describeSandboxConformance } from '@cordon/conformance'
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
  // What is proved and what is checked as a refusal comes from the backend's
  // declaration (provider.enforcement): no terminal, no pause, no external watch.
  createProvider: () => {
    return createMicroVMSandboxProvider({ backend: standin.backendConfig() })
  },
})
