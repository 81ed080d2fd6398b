import { newSandboxId } from '@cordon/core/backend'
import {
  AgentClient,
  type AgentClientTuning,
  AgentSandbox,
  type AgentSandboxInit,
  dialTcp,
} from '../src/sandbox/index.js'
import { UNISOLATED } from './unisolated.js'

/**
 * An AgentSandbox over TCP to an agent (or a scripted stand-in for one) on
 * 127.0.0.1:`port`, isolating nothing: for tests of the agent's and the
 * sandbox object's own behaviour. `init` overrides any field (a freezer, a
 * release hook, the root directory).
 */
export function tcpAgentSandbox(options: {
  readonly port: number
  readonly secret: string
  readonly tuning?: AgentClientTuning
  readonly init?: Partial<AgentSandboxInit>
}): AgentSandbox {
  const { port, secret } = options
  return new AgentSandbox({
    ...UNISOLATED,
    id: newSandboxId(),
    rootDir: '/tmp',
    env: {},
    workingDirectory: undefined,
    client: new AgentClient({
      secret,
      dial: dialTcp('127.0.0.1', port),
      description: `tcp:127.0.0.1:${port}`,
      ...options.tuning,
    }),
    backend: 'test:agent',
    emit: () => {},
    release: async () => {},
    ...options.init,
  })
}
