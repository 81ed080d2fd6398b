/**
 * `@cordon/ai-sdk`: cordon as a sandbox of the AI SDK's harness.
 * `createCordonHarnessSandbox(provider)` goes where the harness takes a
 * `HarnessV1SandboxProvider`; a session's `restricted()` view is an
 * `Experimental_SandboxSession` for `generateText`'s `experimental_sandbox`.
 *
 * The list is explicit on purpose (a test pins it): what is exported here is
 * public API.
 */
export {
  type CordonHarnessSandboxOptions,
  type CordonHarnessSandboxProvider,
  createCordonHarnessSandbox,
} from './harness-sandbox-provider.js'
export { CordonHarnessSession } from './network-sandbox-session.js'
export { CordonHarnessSessionExistsError } from './session-exists-error.js'
