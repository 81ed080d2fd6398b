import {
  type CordonSandboxProvider,
  type Sandbox,
  SandboxConfigValidationError,
  SandboxControlRefusedError,
  type SandboxCreateConfig,
  SandboxCredentialRefusedError,
  SandboxNotFoundError,
  type SandboxProvider,
} from '@cordon/core'
import {
  isNoopSnapshotSpec,
  type Manifest,
  normalizeSandboxClientCreateArgs,
  type SandboxClient,
  type SandboxClientCreateArgs,
  type SandboxClientOptions,
  SandboxConfigurationError,
  SandboxLifecycleError,
  SandboxUnsupportedFeatureError,
} from '@openai/agents-core/sandbox'
import {
  deserializeManifest,
  sanitizeEnvironmentForPersistence,
  serializeManifest,
} from '@openai/agents-core/sandbox/internal'
import { assertManifestSupported } from './manifest-support.js'
import { materializeEntries, placeManifestEntries } from './materialize-entries.js'
import { CordonSandboxSession, type CordonSandboxSessionState } from './sandbox-session.js'

/**
 * What one `create` passes to cordon besides the manifest: the sandbox's
 * egress policy, exec timeout, memory and process limits, lifetime. The
 * manifest supplies the environment and working directory.
 */
export type CordonSandboxCreateOptions = Omit<
  SandboxCreateConfig,
  'env' | 'workingDirectory' | 'signal'
>

export interface CordonSandboxClientOptions extends SandboxClientOptions {
  /** Applied to every sandbox this client creates (a `create` call's own options win). */
  readonly sandbox?: CordonSandboxCreateOptions
}

const OPTION_KEYS = new Set(['sandbox'])

/**
 * A `SandboxClient` of the OpenAI Agents SDK over any cordon provider: each
 * session is one cordon sandbox, created from the SDK's manifest (its
 * entries written into the workspace, its environment and root as the
 * sandbox's environment and working directory).
 *
 * The manifest root must be the sandbox's writable root (`rootDir`, the
 * provider layout's outputs path) or a directory under it; anything else is
 * refused at create with the SDK's configuration error.
 *
 * Session state resumes within the process that created the sandbox (the
 * client keeps its live sandboxes by id) and, for a sandbox created
 * detached (`sandbox: { detached: true, lifetimeMs }`), from any other
 * process: `resume` connects to it by id (`provider.connect`, with the
 * credential the provider's credential store holds; the serialized state
 * carries no credential). A state whose sandbox cannot be reached (not
 * detached, ended, no credential here, or a provider without `connect`) is
 * refused with the SDK's lifecycle error and the runtime creates a fresh
 * sandbox.
 */
export class CordonSandboxClient
  implements SandboxClient<CordonSandboxClientOptions, CordonSandboxSessionState>
{
  readonly backendId = 'cordon'
  readonly provider: SandboxProvider
  readonly #options: CordonSandboxClientOptions
  readonly #live = new Map<string, Sandbox>()

  constructor(provider: SandboxProvider, options: CordonSandboxClientOptions = {}) {
    refuseUnknownOptions(options, provider.id)
    this.provider = provider
    this.#options = options
  }

  async create(
    args?: SandboxClientCreateArgs<CordonSandboxClientOptions> | Manifest,
    manifestOptions?: CordonSandboxClientOptions,
  ): Promise<CordonSandboxSession> {
    const createArgs = normalizeSandboxClientCreateArgs(args, manifestOptions)
    const manifest = createArgs.manifest
    const providerId = this.provider.id
    if (createArgs.snapshot !== undefined && !isNoopSnapshotSpec(createArgs.snapshot)) {
      throw new SandboxUnsupportedFeatureError(
        `cordon (${providerId}) does not snapshot or restore workspaces: remove the snapshot spec.`,
        { provider: 'cordon', feature: 'snapshot', snapshotType: createArgs.snapshot.type },
      )
    }
    if (createArgs.options) refuseUnknownOptions(createArgs.options, providerId)
    assertManifestSupported(manifest, providerId)
    const environment = await manifest.resolveEnvironment()
    // cordon makes the working directory at create, or refuses it there.
    const sandbox = await this.provider
      .create({
        ...this.#options.sandbox,
        ...createArgs.options?.sandbox,
        env: environment,
        workingDirectory: manifest.root,
      })
      .catch((error: unknown) => {
        throw rootRefusal(error, manifest.root, providerId) ?? error
      })
    try {
      await prepareWorkspace(sandbox, manifest, providerId)
      await materializeEntries(sandbox, placeManifestEntries(manifest))
    } catch (error) {
      await sandbox.destroy()
      throw error
    }
    this.#forgetDestroyed()
    this.#live.set(sandbox.id, sandbox)
    return new CordonSandboxSession(sandbox, {
      manifest,
      environment,
      sandboxId: sandbox.id,
      providerId,
      snapshot: null,
      workspaceReady: true,
    })
  }

  /** Destroys the session's sandbox. Idempotent. */
  async delete(state: CordonSandboxSessionState): Promise<void> {
    const sandbox = this.#live.get(state.sandboxId)
    this.#live.delete(state.sandboxId)
    await sandbox?.destroy()
  }

  async resume(state: CordonSandboxSessionState): Promise<CordonSandboxSession> {
    const held = this.#live.get(state.sandboxId)
    if (held && held.status !== 'destroyed') return new CordonSandboxSession(held, state)
    this.#live.delete(state.sandboxId)
    const sandbox = await this.#connect(state)
    this.#forgetDestroyed()
    this.#live.set(sandbox.id, sandbox)
    return new CordonSandboxSession(sandbox, state)
  }

  /** Reaches a detached sandbox another process made, or refuses in the SDK's lifecycle terms. */
  async #connect(state: CordonSandboxSessionState): Promise<Sandbox> {
    const connect = (this.provider as Partial<CordonSandboxProvider>).connect
    const refuse = (reason: string, cause?: unknown) =>
      new SandboxLifecycleError(
        `cordon (${state.providerId}) cannot resume sandbox ${state.sandboxId}: it is not live in this process, and it cannot be reached from another process: ${reason}. Create a fresh sandbox.`,
        { provider: 'cordon', sandboxId: state.sandboxId, feature: 'resume', cause },
      )
    if (typeof connect !== 'function') throw refuse('this provider has no connect()')
    try {
      return await connect.call(this.provider, state.sandboxId)
    } catch (error) {
      if (
        SandboxNotFoundError.isInstance(error) ||
        SandboxCredentialRefusedError.isInstance(error) ||
        SandboxControlRefusedError.isInstance(error)
      )
        throw refuse(error.message, error)
      throw error
    }
  }

  /** A preserved session is reusable while its sandbox is live in this client. */
  canReusePreservedOwnedSession(state: CordonSandboxSessionState): boolean {
    const sandbox = this.#live.get(state.sandboxId)
    return sandbox !== undefined && sandbox.status !== 'destroyed'
  }

  /**
   * Drops sandboxes that are gone (shut down by the runtime, ended by their
   * lifetime or lost), so a long-lived client holds only live ones.
   */
  #forgetDestroyed(): void {
    for (const [id, sandbox] of this.#live) {
      if (sandbox.status === 'destroyed') this.#live.delete(id)
    }
  }

  async serializeSessionState(state: CordonSandboxSessionState): Promise<Record<string, unknown>> {
    return {
      manifest: serializeManifest(state.manifest),
      // Ephemeral and referenced values (secrets) are left out, as the SDK's own clients do.
      environment: sanitizeEnvironmentForPersistence(state),
      sandboxId: state.sandboxId,
      providerId: state.providerId,
      exposedPorts: state.exposedPorts ?? null,
    }
  }

  async deserializeSessionState(
    state: Record<string, unknown>,
  ): Promise<CordonSandboxSessionState> {
    const { sandboxId, providerId, environment, manifest } = state
    if (typeof sandboxId !== 'string' || typeof providerId !== 'string') {
      throw new SandboxConfigurationError(
        'cordon sandbox session state needs a sandboxId and a providerId.',
        { provider: 'cordon' },
      )
    }
    return {
      manifest: deserializeManifest(manifest as Record<string, unknown> | undefined),
      environment: isStringRecord(environment) ? environment : {},
      sandboxId,
      providerId,
      snapshot: null,
      workspaceReady: true,
    }
  }
}

/**
 * The workspace is the manifest root, which must be writable: the sandbox's
 * root or a directory under it (made here).
 */
/**
 * The manifest root must be writable: the sandbox's rootDir or under it.
 * cordon has made it by now (it is the sandbox's working directory); one that
 * already existed elsewhere (`/tmp`) is still refused.
 */
async function prepareWorkspace(sandbox: Sandbox, manifest: Manifest, providerId: string) {
  const root = manifest.root
  const writable = sandbox.rootDir
  if (root === writable || root.startsWith(`${writable}/`)) return
  throw new SandboxConfigurationError(
    `The manifest root ${root} is not writable in a cordon sandbox of ${providerId}, whose writable root is ${writable}: set the provider's layout.outputs.containerPath to ${root}, or the manifest root to ${writable} or a directory under it.`,
    { provider: 'cordon', root, rootDir: writable },
  )
}

/** cordon refusing the manifest root as the working directory, as the SDK's configuration error. */
function rootRefusal(
  error: unknown,
  root: string,
  providerId: string,
): SandboxConfigurationError | undefined {
  if (!SandboxConfigValidationError.isInstance(error)) return undefined
  const issue = error.issues.find((candidate) => candidate.path === 'workingDirectory')
  if (!issue) return undefined
  return new SandboxConfigurationError(
    `The manifest root ${root} cannot be made in a cordon sandbox of ${providerId} (${issue.message}): set the provider's layout.outputs.containerPath to ${root}, or the manifest root to the outputs path or a directory under it.`,
    { provider: 'cordon', root },
  )
}

function refuseUnknownOptions(options: SandboxClientOptions, providerId: string): void {
  for (const key of Object.keys(options)) {
    if (!OPTION_KEYS.has(key)) {
      throw new SandboxUnsupportedFeatureError(
        `cordon (${providerId}) has no client option "${key}": sandbox settings go in "sandbox" (egress, timeoutMs, memoryLimitMb, ...) or in the cordon provider.`,
        { provider: 'cordon', feature: key },
      )
    }
  }
}

function isStringRecord(value: unknown): value is Record<string, string> {
  return (
    typeof value === 'object' &&
    value !== null &&
    Object.values(value).every((entry) => typeof entry === 'string')
  )
}
