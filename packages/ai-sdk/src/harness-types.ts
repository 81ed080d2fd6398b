import type { HarnessV1NetworkSandboxSession } from '@ai-sdk/harness'

/**
 * The AI SDK's `Experimental_SandboxSession` and `Experimental_SandboxProcess`,
 * reached through `@ai-sdk/harness` (a peer) so that the published types need
 * no direct dependency on `@ai-sdk/provider-utils`.
 */
export type SandboxSessionView = ReturnType<HarnessV1NetworkSandboxSession['restricted']>
export type SandboxProcessHandle = Awaited<ReturnType<SandboxSessionView['spawn']>>
