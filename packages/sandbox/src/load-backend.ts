import { SandboxBackendNotInstalledError, SandboxBackendUnavailableError } from '@cordon/core'
import type { SandboxBackendModule } from '@cordon/core/backend'

export type ModuleImporter = (specifier: string) => Promise<unknown>

const nativeImport: ModuleImporter = (specifier) => import(specifier)

/**
 * Imports a backend package on first use. A package that is not installed
 * becomes {@link SandboxBackendNotInstalledError} naming what to install; a
 * package that loads but does not export `createBackend` is reported as
 * unavailable rather than crashing later.
 */
export async function loadBackendModule(
  backendName: string,
  packageName: string,
  importer: ModuleImporter = nativeImport,
): Promise<SandboxBackendModule<unknown>> {
  const module = (await importBackendPackage(backendName, packageName, importer)) as Partial<
    SandboxBackendModule<unknown>
  >
  if (typeof module?.createBackend !== 'function') {
    throw new SandboxBackendUnavailableError(
      backendName,
      `${packageName} does not export createBackend(); is it a cordon backend package?`,
    )
  }
  return module as SandboxBackendModule<unknown>
}

/**
 * Imports a backend package: one that is not installed is
 * {@link SandboxBackendNotInstalledError} naming what to install, one that
 * fails to load is {@link SandboxBackendUnavailableError} with the reason.
 */
export async function importBackendPackage(
  backendName: string,
  packageName: string,
  importer: ModuleImporter = nativeImport,
): Promise<unknown> {
  try {
    return await importer(packageName)
  } catch (error) {
    if (isMissingPackage(error, packageName)) {
      throw new SandboxBackendNotInstalledError(backendName, packageName, { cause: error })
    }
    throw new SandboxBackendUnavailableError(
      backendName,
      `Loading ${packageName} failed: ${String((error as Error)?.message ?? error)}`,
      {
        cause: error,
      },
    )
  }
}

function isMissingPackage(error: unknown, packageName: string): boolean {
  const code = (error as { code?: unknown })?.code
  const message = String((error as { message?: unknown })?.message ?? '')
  return (
    (code === 'ERR_MODULE_NOT_FOUND' || code === 'MODULE_NOT_FOUND') &&
    message.includes(packageName)
  )
}
