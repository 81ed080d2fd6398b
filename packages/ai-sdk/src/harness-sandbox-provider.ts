import { HarnessCapabilityUnsupportedError, type HarnessV1SandboxProvider } from '@ai-sdk/harness'
import {
  type CordonSandboxProvider,
  type Sandbox,
  SandboxControlRefusedError,
  type SandboxCreateConfig,
  SandboxCredentialRefusedError,
  SandboxNotFoundError,
  type SandboxProvider,
} from '@cordon/core'
import { CordonHarnessSession } from './network-sandbox-session.js'
import { CordonHarnessSessionExistsError } from './session-exists-error.js'
import { SessionIndex } from './session-index.js'

type CreateSessionRequest = NonNullable<Parameters<HarnessV1SandboxProvider['createSession']>[0]>

export interface CordonHarnessSandboxOptions {
  /**
   * What cordon's `provider.create()` takes for each session: `egress` (the
   * policy the sandbox starts with), `env`, `workingDirectory`, `timeoutMs`
   * (per command), `memoryLimitMb`, `maxProcesses`, `lifetimeMs`.
   */
  readonly sandbox?: Omit<SandboxCreateConfig, 'signal'>
  /** Ports each session exposes from the start (`setPorts` replaces them). */
  readonly ports?: readonly number[]
  /**
   * Where the session id of each detached session (`sandbox: { detached:
   * true, lifetimeMs }`) is written beside its sandbox id, so another
   * process can resume it: a directory (mode 0700; one 0600 file per
   * session, removed when the session stops). Default:
   * `$XDG_STATE_HOME/cordon/harness-sessions`, else
   * `~/.local/state/cordon/harness-sessions`.
   */
  readonly sessionDirectory?: string
}

/**
 * A harness sandbox provider over any cordon provider: each harness session
 * is one cordon sandbox. Like every harness provider it does no I/O when
 * made; `createSession` creates the sandbox.
 *
 * This adapter keys no snapshot by `identity` (not every cordon backend
 * takes snapshots, and one keyed so would outlive the sessions that made
 * it): `onFirstCreate` runs on every fresh sandbox, as the harness contract
 * asks of providers without snapshots. `resumeSession` reattaches to a session
 * that is live in this process (by the `sessionId` it was created with, or
 * its sandbox id), and, for a detached session (`sandbox: { detached: true,
 * lifetimeMs }`), from any other process: the session id leads to the
 * sandbox id in the session directory, and `provider.connect` reaches it
 * with the credential the provider keeps. Anything else (not detached,
 * ended, a provider without `connect`) is refused with
 * `HarnessCapabilityUnsupportedError`.
 */
/**
 * The harness's provider, whose sessions are typed as what they are: a
 * {@link CordonHarnessSession}, so host code reads `session.sandbox` (the
 * cordon sandbox) without a cast.
 */
export interface CordonHarnessSandboxProvider extends HarnessV1SandboxProvider {
  createSession(
    ...args: Parameters<HarnessV1SandboxProvider['createSession']>
  ): Promise<CordonHarnessSession>
  resumeSession(
    ...args: Parameters<NonNullable<HarnessV1SandboxProvider['resumeSession']>>
  ): Promise<CordonHarnessSession>
}

export function createCordonHarnessSandbox(
  provider: SandboxProvider,
  options: CordonHarnessSandboxOptions = {},
): CordonHarnessSandboxProvider {
  const live = new Map<string, CordonHarnessSession>()
  const index = new SessionIndex(options.sessionDirectory ?? SessionIndex.defaultDirectory())
  const open = async (id: string, sandbox: Sandbox): Promise<CordonHarnessSession> => {
    const session = new CordonHarnessSession({
      id,
      sandbox,
      providerId: provider.id,
      ports: options.ports ?? [],
      onDestroyed: () => {
        if (live.get(id) === session) live.delete(id)
        if ((sandbox as { detached?: boolean }).detached) index.delete(id)
      },
    })
    // Forwards are this process's listeners: made again on every open.
    if (options.ports && options.ports.length > 0) await session.setPorts(options.ports)
    return session
  }
  // Sessions being created under a sessionId: a second call while the first
  // awaits its sandbox would otherwise pass the check in createSession too.
  const creating = new Set<string>()
  const createHeld = async (request: CreateSessionRequest): Promise<CordonHarnessSession> => {
    const sandbox = await provider.create({
      ...options.sandbox,
      ...(request.abortSignal ? { signal: request.abortSignal } : {}),
    })
    const id = request.sessionId ?? sandbox.id
    let session: CordonHarnessSession | undefined
    try {
      session = await open(id, sandbox)
      // Written before the first-create hook runs: a process that dies in it leaves a resumable session.
      if ((sandbox as { detached?: boolean }).detached && request.sessionId)
        index.set(request.sessionId, sandbox.id)
      await request.onFirstCreate?.(session.restricted(), {
        ...(request.abortSignal ? { abortSignal: request.abortSignal } : {}),
      })
    } catch (error) {
      await (session ? session.destroy() : sandbox.destroy())
      throw error
    }
    // Sessions whose sandbox ended without stop (lifetime, lost) are dropped here.
    for (const [key, held] of live) {
      if (held.sandbox.status === 'destroyed') live.delete(key)
    }
    live.set(id, session)
    return session
  }
  const refuseResume = (sessionId: string, reason: string) =>
    new HarnessCapabilityUnsupportedError({
      message: `cordon (${provider.id}) cannot resume sandbox session "${sessionId}": it is not live in this process, and it cannot be reached from another process: ${reason}`,
    })
  return {
    specificationVersion: 'harness-sandbox-v1',
    providerId: `cordon:${provider.id}`,
    async createSession(request = {}): Promise<CordonHarnessSession> {
      request.abortSignal?.throwIfAborted()
      const { sessionId } = request
      if (sessionId !== undefined) {
        const held = live.get(sessionId)
        if (creating.has(sessionId) || (held && held.sandbox.status !== 'destroyed'))
          throw new CordonHarnessSessionExistsError({ sessionId, providerId: provider.id })
        creating.add(sessionId)
      }
      try {
        return await createHeld(request)
      } finally {
        if (sessionId !== undefined) creating.delete(sessionId)
      }
    },
    async resumeSession({ sessionId, abortSignal }): Promise<CordonHarnessSession> {
      abortSignal?.throwIfAborted()
      const held = live.get(sessionId)
      if (held && held.sandbox.status !== 'destroyed') return held
      live.delete(sessionId)
      const connect = (provider as Partial<CordonSandboxProvider>).connect
      if (typeof connect !== 'function')
        throw refuseResume(sessionId, 'this provider has no connect()')
      const sandboxId = index.get(sessionId)
      if (!sandboxId)
        throw refuseResume(
          sessionId,
          `no detached sandbox is recorded for it in ${index.directory} (create sessions with sandbox: { detached: true, lifetimeMs })`,
        )
      let sandbox: Sandbox
      try {
        sandbox = await connect.call(
          provider,
          sandboxId,
          abortSignal ? { signal: abortSignal } : {},
        )
      } catch (error) {
        if (
          SandboxNotFoundError.isInstance(error) ||
          SandboxCredentialRefusedError.isInstance(error) ||
          SandboxControlRefusedError.isInstance(error)
        ) {
          if (SandboxNotFoundError.isInstance(error)) index.delete(sessionId)
          throw refuseResume(sessionId, error.message)
        }
        throw error
      }
      const session = await open(sessionId, sandbox)
      live.set(sessionId, session)
      return session
    },
  }
}
