import { fileURLToPath } from 'node:url'

export {
  AGENT_ENV,
  type AgentConfig,
  AgentConfigError,
  type AgentListenAddress,
  readAgentConfig,
} from './agent-config.js'
export { AGENT_VERSION } from './agent-connection.js'
export { type RunningAgent, startAgent } from './agent-server.js'
export { EXEC_MARKER_VARIABLE } from './process-tree.js'

/**
 * Absolute path of the bundled agent program (`dist/cordon-agent.mjs`), the
 * file to copy or mount into a guest image and run with `node`.
 */
export function agentProgramPath(): string {
  return fileURLToPath(new URL('./cordon-agent.mjs', import.meta.url))
}
