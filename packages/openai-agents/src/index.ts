/**
 * `@cordon/openai-agents`: cordon as a sandbox of the OpenAI Agents SDK.
 * `new CordonSandboxClient(provider)` goes where the SDK takes a sandbox
 * client (`run(agent, input, { sandbox: { client } })`).
 *
 * The list is explicit on purpose (a test pins it): what is exported here is
 * public API.
 */
export {
  CordonSandboxClient,
  type CordonSandboxClientOptions,
  type CordonSandboxCreateOptions,
} from './sandbox-client.js'
export { CordonSandboxSession, type CordonSandboxSessionState } from './sandbox-session.js'
