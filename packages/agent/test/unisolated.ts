import type { AgentSandboxInit } from '../src/sandbox/index.js'

/**
 * What an agent started by these tests as a local process enforces: nothing
 * but what the agent itself does (its path jail); no isolation, no limits.
 */
export const UNISOLATED: Pick<AgentSandboxInit, 'environment' | 'enforcement'> = {
  environment: 'basic',
  enforcement: {
    backend: 'test:agent',
    isolation: 'none',
    egress: { kind: 'allow-all' },
    limits: {},
    mounts: [],
  },
}
