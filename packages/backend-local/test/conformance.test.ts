import { describeSandboxConformance } from '@cordon/conformance'
import { createLocalSandboxProvider } from '../src/index.js'

// No boundary: the agent and its commands run as the host's user, on its
// kernel and network. Every limit, deny-all, pause, terminals and external
// watches are declared absent in its definition, and the suite reads that
// declaration (provider.enforcement) and checks each of them as a refusal.
describeSandboxConformance({
  name: 'process:local',
  createProvider: () =>
    createLocalSandboxProvider({
      backend: { tier: 'process', runtime: 'local' },
      defaultEgress: { kind: 'allow-all' },
    }),
})
