import type { RegistryCredential } from '@cordon/builtin-backends'
import { registryHostKey } from '@cordon/builtin-backends'

/** The engine's AuthConfig (the `X-Registry-Auth` header), as dockerode sends it. */
export interface EngineAuthConfig {
  readonly username: string
  readonly password: string
  readonly serveraddress: string
}

/** Where the engine looks up Docker Hub's credentials in a build's registry config. */
const DOCKER_HUB_INDEX = 'https://index.docker.io/v1/'

/** The credential `registryAuth` holds for `registry`, as the engine takes it; undefined if none. */
export function engineAuthFor(
  registryAuth: Readonly<Record<string, RegistryCredential>> | undefined,
  registry: string,
): EngineAuthConfig | undefined {
  for (const [host, credential] of Object.entries(registryAuth ?? {})) {
    if (registryHostKey(host) !== registry) continue
    return {
      username: credential.username,
      password: credential.password,
      serveraddress: registry === 'docker.io' ? DOCKER_HUB_INDEX : registry,
    }
  }
  return undefined
}

/**
 * Every credential of `registryAuth`, keyed as a build's registry config
 * (`X-Registry-Config`) is: the engine picks the one of each `FROM` image's
 * registry.
 */
export function engineRegistryConfig(
  registryAuth: Readonly<Record<string, RegistryCredential>> | undefined,
): Record<string, EngineAuthConfig> | undefined {
  const entries = Object.keys(registryAuth ?? {}).map((host) => {
    const auth = engineAuthFor(registryAuth, registryHostKey(host))!
    return [auth.serveraddress, auth] as const
  })
  return entries.length > 0 ? Object.fromEntries(entries) : undefined
}
