/**
 * `@cordon/agent/sandbox`: a cordon `Sandbox` implemented over the agent
 * protocol, for every backend whose runtime has no exec or file API of its
 * own. A backend supplies the dial (how a byte stream to the agent is opened)
 * and the release (how the sandbox is deleted); everything between is here.
 *
 * Needs `@cordon/core` (a peer dependency). The agent program itself never
 * imports this module.
 */

export {
  AgentClient,
  type AgentClientOptions,
  type AgentClientTuning,
  type AgentDial,
  type AgentStreamKind,
  RetryableDialError,
} from './agent-client.js'
export { makeAgentCodeCache } from './agent-code-cache.js'
export { refusedTheSecret, toSandboxError } from './agent-error-mapping.js'
export { AgentProcess, type AgentProcessEnding, type AgentProcessHooks } from './agent-process.js'
export {
  AgentSandbox,
  type AgentSandboxInit,
  type LostReason,
  ReleasedWithError,
  type SandboxFreezer,
} from './agent-sandbox.js'
export { makeAgentSnapshot } from './agent-snapshot.js'
export { type HostHoldKeeper, keepHostHold } from './host-hold-keeper.js'
export { dialTcp, dialUnix, type SocketConnectOptions, socketConnected } from './socket-dial.js'
export { StdioChannel, type StdioChannelOptions } from './stdio-channel.js'
export {
  isRetryableReadinessFailure,
  waitForAgent,
  waitForAgentConnection,
} from './wait-for-agent.js'
