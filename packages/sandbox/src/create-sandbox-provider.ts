import { builtinBackends, type SandboxProviderConfig } from '@cordon/builtin-backends'
import type {
  CordonSandboxProvider,
  SandboxBackendConfigBase,
  SandboxBackendDefinition,
  SandboxProviderConfigFor,
} from '@cordon/core'
import { SandboxBackendUnavailableError, SandboxError } from '@cordon/core'
import { composeProvider, prepareProviderConfig } from '@cordon/core/backend'
import { loadBackendModule, type ModuleImporter } from './load-backend.js'

export interface CreateSandboxProviderOptions {
  /** How the built-in backend packages are imported; tests and bundlers may replace it. */
  readonly importBackend?: ModuleImporter
}

/** Options naming backends besides the built-in ones, e.g. a third-party package's definition. */
export interface CreateSandboxProviderWithBackendsOptions<Config extends SandboxBackendConfigBase>
  extends CreateSandboxProviderOptions {
  /** Backend definitions (`defineBackend`) the config may name, besides the built-in ones. */
  readonly backends: readonly SandboxBackendDefinition<Config>[]
}

/**
 * The config a backend definition takes; over several definitions, any of
 * theirs. It lets a host pass two or more third-party definitions with
 * different configs and a literal config, with no type argument or cast
 * (inferring one `Config` from such a list fails).
 */
export type BackendConfigOf<Definition> =
  Definition extends SandboxBackendDefinition<infer Config> ? Config : never

/**
 * Builds a {@link CordonSandboxProvider} for the backend the config names:
 * one of the built-in backends, or one of `options.backends`.
 *
 * The config is validated here, synchronously and without I/O, with the
 * chosen backend's schema; every problem is reported at once as
 * `SandboxConfigValidationError` (`ContainerSandboxLayoutValidationError`
 * when the layout has one), and a control the backend declares it cannot
 * enforce is refused with `SandboxControlRefusedError`. The backend's code
 * is loaded on first use, so a host installs only the backend it uses; a
 * missing built-in package fails with `SandboxBackendNotInstalledError`
 * naming it. A config no backend takes raises
 * `SandboxBackendNotImplementedError`.
 */
export function createSandboxProvider(
  config: SandboxProviderConfig,
  options?: CreateSandboxProviderOptions,
): CordonSandboxProvider
export function createSandboxProvider<Config extends SandboxBackendConfigBase>(
  config: SandboxProviderConfigFor<Config>,
  options: CreateSandboxProviderWithBackendsOptions<Config>,
): CordonSandboxProvider
export function createSandboxProvider<
  const Definitions extends readonly SandboxBackendDefinition[],
>(
  config: SandboxProviderConfigFor<BackendConfigOf<Definitions[number]>>,
  options: CreateSandboxProviderOptions & { readonly backends: Definitions },
): CordonSandboxProvider
export function createSandboxProvider(
  config: SandboxProviderConfigFor<SandboxBackendConfigBase>,
  options: Partial<CreateSandboxProviderWithBackendsOptions<SandboxBackendConfigBase>> = {},
): CordonSandboxProvider {
  // The chosen backend's name, for the error that names a package to install.
  let chosen = ''
  const builtins = builtinBackends((packageName) =>
    loadBackendModule(chosen, packageName, options.importBackend),
  )
  const definitions = [
    ...(options.backends ?? []),
    ...(Object.values(builtins) as unknown as SandboxBackendDefinition[]),
  ]
  const prepared = prepareProviderConfig(config, definitions)
  const { definition } = prepared
  chosen = definition.name
  return composeProvider({
    ...prepared,
    loadBackend: async (context) => {
      let factory: Awaited<ReturnType<typeof definition.load>>
      try {
        factory = await definition.load()
      } catch (error) {
        if (SandboxError.isInstance(error)) throw error
        throw new SandboxBackendUnavailableError(
          definition.name,
          `Loading the backend failed: ${String((error as Error)?.message ?? error)}`,
          { cause: error },
        )
      }
      if (typeof factory !== 'function') {
        throw new SandboxBackendUnavailableError(
          definition.name,
          'its definition loaded no factory; does its package export createBackend()?',
        )
      }
      return factory(prepared.config.backend, context)
    },
  })
}
