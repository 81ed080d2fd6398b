import {
  HarnessCapabilityUnsupportedError,
  type HarnessV1NetworkSandboxSession,
  type HarnessV1SandboxProvider,
} from '@ai-sdk/harness'
import type { SandboxCreateConfig, SandboxProvider } from '@cordon/core'
import { CordonHarnessSession } from './network-sandbox-session.js'

export interface CordonHarnessSandboxOptions {
  /**
   * What cordon's `provider.create()` takes for each session: `egress` (the
   * policy the sandbox starts with), `env`, `workingDirectory`, `timeoutMs`
   * (per command), `memoryLimitMb`, `maxProcesses`, `lifetimeMs`.
   */
  readonly sandbox?: Omit<SandboxCreateConfig, 'signal'>
  /** Ports each session exposes from the start (`setPorts` replaces them). */
  readonly ports?: readonly number[]
}

/**
 * A harness sandbox provider over any cordon provider: each harness session
 * is one cordon sandbox. Like every harness provider it does no I/O when
 * made; `createSession` creates the sandbox.
 *
 * cordon keeps no snapshots, so `identity` names nothing to reuse and
 * `onFirstCreate` runs on every fresh sandbox, as the harness contract asks
 * of providers without snapshots. `resumeSession` reattaches to a session
 * that is live in this process (by the `sessionId` it was created with, or
 * its sandbox id); no cordon backend can find a sandbox again from another
 * process, so anything else is refused with `HarnessCapabilityUnsupportedError`.
 */
export function createCordonHarnessSandbox(
  provider: SandboxProvider,
  options: CordonHarnessSandboxOptions = {},
): HarnessV1SandboxProvider {
  const live = new Map<string, CordonHarnessSession>()
  return {
    specificationVersion: 'harness-sandbox-v1',
    providerId: `cordon:${provider.id}`,
    async createSession(request = {}): Promise<HarnessV1NetworkSandboxSession> {
      request.abortSignal?.throwIfAborted()
      const sandbox = await provider.create({
        ...options.sandbox,
        ...(request.abortSignal ? { signal: request.abortSignal } : {}),
      })
      const id = request.sessionId ?? sandbox.id
      const session = new CordonHarnessSession({
        id,
        sandbox,
        providerId: provider.id,
        ports: options.ports ?? [],
        onDestroyed: () => {
          if (live.get(id) === session) live.delete(id)
        },
      })
      try {
        if (options.ports && options.ports.length > 0) await session.setPorts(options.ports)
        await request.onFirstCreate?.(session.restricted(), {
          ...(request.abortSignal ? { abortSignal: request.abortSignal } : {}),
        })
      } catch (error) {
        await session.destroy()
        throw error
      }
      // Sessions whose sandbox ended without stop (lifetime, lost) are dropped here.
      for (const [key, held] of live) {
        if (held.sandbox.status === 'destroyed') live.delete(key)
      }
      live.set(id, session)
      return session
    },
    async resumeSession({ sessionId, abortSignal }): Promise<HarnessV1NetworkSandboxSession> {
      abortSignal?.throwIfAborted()
      const session = live.get(sessionId)
      if (!session || session.sandbox.status === 'destroyed') {
        live.delete(sessionId)
        throw new HarnessCapabilityUnsupportedError({
          message: `cordon (${provider.id}) cannot resume sandbox session "${sessionId}": it is not live in this process, and no cordon backend finds a sandbox again from another process`,
        })
      }
      return session
    },
  }
}
