import { ALL_CAPABILITIES, describeSandboxConformance } from '@cordon/conformance'
import { createLocalSandboxProvider } from '../src/index.js'

// No boundary: the agent and its commands run as the host's user, on its
// kernel and network. Every limit, deny-all, pause, terminals and external
// watches are declared absent, so the suite checks each of them as a refusal.
describeSandboxConformance({
  name: 'process:local',
  capabilities: {
    ...ALL_CAPABILITIES,
    memoryLimit: false,
    oomReporting: false,
    survivesOutOfMemory: false,
    processLimit: false,
    denyAllNetwork: false,
    terminal: false,
    pause: false,
    externalWatch: false,
    measuredUsage: ['cpuTimeMs', 'memoryBytes', 'processes', 'diskBytes'],
  },
  createProvider: () =>
    createLocalSandboxProvider({
      backend: { tier: 'process', runtime: 'local' },
      defaultEgress: { kind: 'allow-all' },
    }),
})
