import type { CordonSandboxProvider, SandboxProviderConfig } from '@cordon/core'
import { composeProvider, prepareProviderConfig } from '@cordon/core/backend'
import { BACKEND_PACKAGES } from './backend-packages.js'
import { loadBackendModule, type ModuleImporter } from './load-backend.js'

export interface CreateSandboxProviderOptions {
  /** How backend packages are imported; tests and bundlers may replace it. */
  readonly importBackend?: ModuleImporter
}

/**
 * Builds a {@link CordonSandboxProvider} for the backend the config names.
 *
 * The config is validated here, synchronously and without I/O; every problem
 * is reported at once as `SandboxConfigValidationError`. The backend package is
 * imported lazily on first use, so a host installs only the backend it uses; a
 * missing one fails with `SandboxBackendNotInstalledError` naming the package.
 * An unknown tier or runtime from untyped JavaScript raises
 * `SandboxBackendNotImplementedError`.
 */
export function createSandboxProvider(
  config: SandboxProviderConfig,
  options: CreateSandboxProviderOptions = {},
): CordonSandboxProvider {
  const prepared = prepareProviderConfig(config)
  const packageName = BACKEND_PACKAGES[prepared.backendName]
  return composeProvider({
    config: prepared.config,
    backendName: prepared.backendName,
    layout: prepared.layout,
    loadBackend: async (context) => {
      const module = await loadBackendModule(
        prepared.backendName,
        packageName,
        options.importBackend,
      )
      return module.createBackend(prepared.config.backend, context)
    },
  })
}
