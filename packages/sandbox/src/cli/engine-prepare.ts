import type { RegistryCredential } from '@cordon/builtin-backends'
import type { SandboxEvent } from '@cordon/core'
import { loadDockerBackend } from './docker-backend-module.js'

/**
 * What `cordon prepare` does, and `run` and `shell` before they create
 * their sandbox: pulls `image` if the engine lacks it, then fills the agent
 * runtime volume. The pull has no deadline (a create counts a pull against
 * its readiness budget, 30 s unless told otherwise; here a large image takes
 * as long as it takes, its progress on `onEvent`), and `signal` ends it
 * with `SandboxAbortedError`. Resolves with the volume's name.
 */
export async function prepareEngine(
  image: string,
  registryAuth: Record<string, RegistryCredential> | undefined,
  options: { readonly signal: AbortSignal; readonly onEvent: (event: SandboxEvent) => void },
): Promise<string> {
  const backend = await loadDockerBackend()
  const { volume } = await backend.prepareAgentRuntime(
    { image, ...(registryAuth ? { registryAuth } : {}) },
    options,
  )
  return volume
}
