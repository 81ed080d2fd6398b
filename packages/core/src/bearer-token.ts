import { SandboxBackendUnavailableError } from './errors.js'

/**
 * Calls a host's token closure (`getToken`, `getArmToken`) before a request.
 * Backends take a closure rather than a credential so they carry no cloud SDK;
 * a closure that throws or returns nothing means the backend cannot be used
 * now, which is reported as such with the host's error kept as `cause`.
 */
export async function fetchBearerToken(
  getToken: () => Promise<string>,
  backend: string,
  closureName: string,
  audience: string,
): Promise<string> {
  let token: unknown
  try {
    token = await getToken()
  } catch (error) {
    throw new SandboxBackendUnavailableError(
      backend,
      `${closureName}() failed; no bearer token for ${audience}`,
      { cause: error },
    )
  }
  if (typeof token !== 'string' || token.length === 0) {
    throw new SandboxBackendUnavailableError(
      backend,
      `${closureName}() returned no token for ${audience}`,
    )
  }
  return token
}
