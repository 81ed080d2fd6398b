import { defineBackend } from '@cordon/core/backend'
import { type LocalBackendConfig, localBackendConfigSchema } from './local-config.js'

/** `process:local`, as it names itself in errors, events and `provider.backend`. */
export const BACKEND_NAME = 'process:local'

/**
 * The `process:local` backend's definition: hand it to the umbrella
 * (`createSandboxProvider(config, { backends: [localBackend] })`) or use
 * `createLocalSandboxProvider` from this package.
 *
 * It declares only what it does: no isolation (the agent and its commands
 * run as the host's user, on the host's kernel and network), no memory or
 * process limit, no terminal, and `allow-all` as its only egress policy,
 * since nothing stops a local process from reaching the network.
 */
export const localBackend = defineBackend<LocalBackendConfig>({
  name: BACKEND_NAME,
  tier: 'process',
  selects: (backend) =>
    backend.tier === 'process' && 'runtime' in backend && backend.runtime === 'local',
  configSchema: localBackendConfigSchema,
  // An `outputs` mount of the `ephemeral` source maps to the workspace; any
  // other mount is refused at create().
  layout: 'optional',
  enforcement: {
    isolation: 'none',
    environment: 'basic',
    memoryLimit: false,
    oomReporting: false,
    survivesOutOfMemory: false,
    processLimit: false,
    egress: ['allow-all'],
    denyAllNetwork: false,
    terminal: false,
    // It has no freezer for a local process tree and does not offer watches of outside changes.
    pause: false,
    reconnect: false,
    externalWatch: false,
    // A workspace of host files under the host's own user: nothing to capture as an image.
    snapshot: false,
    memorySnapshot: false,
    // Summed over the agent's own process tree and its workspace, never the host's.
    measuredUsage: ['cpuTimeMs', 'memoryBytes', 'processes', 'diskBytes'],
    // Its workspace is a host directory; it keeps nothing named beyond a sandbox.
    volumes: false,
  },
  load: async () => (await import('./local-backend.js')).createBackend,
})
