import type { ContainerBackendConfig } from '@cordon/builtin-backends'
import type {
  CordonSandboxProvider,
  SandboxLifecycleEvent,
  SandboxProviderConfigFor,
} from '@cordon/core'
import {
  type CordonSandboxBackend,
  parseBackendConfig,
  type SandboxBackendContext,
  standaloneProvider,
} from '@cordon/core/backend'
import { ensureAgentRuntime } from './agent-runtime.js'
import { dockerBackend, runscBackend } from './definition.js'
import { DockerBackend } from './docker-backend.js'
import { connectEngine } from './engine-connection.js'
import { translateEngineError } from './engine-errors.js'
import { ImagePuller } from './image-pull.js'

export type { ContainerBackendConfig as DockerBackendConfig } from '@cordon/builtin-backends'
export { LABEL as CORDON_LABELS } from '@cordon/core/backend'
export { dockerBackend, runscBackend } from './definition.js'
export { connectEngine } from './engine-connection.js'
export {
  type CollectGarbageOptions,
  collectGarbage,
  DEFAULT_SNAPSHOT_RETENTION_MS,
  type GarbageReport,
  type UnjudgedResource,
} from './garbage-collect.js'
export {
  type BuiltImage,
  buildImage,
  type ImageBuildOptions,
  type ImageBuildProgress,
} from './image-build.js'
export { ImageBuildError } from './image-build-error.js'

/**
 * Fills the agent runtime volume on the engine ahead of time (normally the
 * first `create()` on an engine does it), so no sandbox pays for it. `image`
 * runs the short-lived container that fills it: any image the sandboxes use.
 * It is pulled first if the engine lacks it (without a deadline: a large
 * image pulled here costs no create its budget).
 * Resolves with the volume's name, and whether it holds cordon-launcher (the
 * agent then starts commands with vfork() rather than by forking Node; see
 * the README, "How a command starts"); a second call finds it there.
 */
export async function prepareAgentRuntime(
  config: Pick<
    ContainerBackendConfig,
    'image' | 'registryAuth' | 'socketPath' | 'host' | 'port' | 'tls'
  >,
  options: {
    /** Ends the image pull, if one is under way, with `SandboxAbortedError` (filling the volume is not cut short). */
    readonly signal?: AbortSignal
    /** Receives the `image.pull.*` events of pulling `image` when the engine lacks it. */
    readonly onEvent?: (event: SandboxLifecycleEvent) => void
  } = {},
): Promise<{
  readonly volume: string
  readonly launcher: boolean
  /** The tmpfs volume holding the huge-page copy of Node the agent starts from, if the engine allows one. */
  readonly hugePageNodeVolume: string | undefined
}> {
  const engine = connectEngine(config)
  await new ImagePuller({
    docker: engine.docker,
    engine: engine.description,
    backend: 'container:docker',
    registryAuth: config.registryAuth,
    emit: (event) => options.onEvent?.(event),
  }).ensure(config.image, options.signal ?? new AbortController().signal)
  const runtime = await ensureAgentRuntime(
    engine.docker,
    engine.endpoint,
    config.image,
    'container:docker',
  ).catch((error: unknown) => {
    throw translateEngineError(error, 'container:docker', engine.description, 'prepare')
  })
  return {
    volume: runtime.volume,
    launcher: runtime.launcher !== undefined,
    hugePageNodeVolume: runtime.hugePageNode?.volume,
  }
}

/** The backend factory the umbrella (`@cordon/sandbox`) loads for `tier: 'container'`. */
export function createBackend(
  config: ContainerBackendConfig,
  context: SandboxBackendContext,
): CordonSandboxBackend<'container'> {
  const definition = config?.runtime === 'runsc' ? runscBackend : dockerBackend
  return new DockerBackend(parseBackendConfig(definition, config), context)
}

/**
 * A provider on the Docker backend without the umbrella package, for hosts
 * that depend on `@cordon/backend-docker` alone.
 */
export function createDockerSandboxProvider(
  config: SandboxProviderConfigFor<ContainerBackendConfig>,
): CordonSandboxProvider {
  return standaloneProvider(config, [dockerBackend, runscBackend], createBackend)
}
