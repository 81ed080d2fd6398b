import { SandboxBackendUnavailableError, SandboxError, SandboxOperationError } from '@cordon/core'

const UNREACHABLE_CODES = new Set([
  'ECONNREFUSED',
  'ENOENT',
  'EACCES',
  'EHOSTUNREACH',
  'ETIMEDOUT',
  'ECONNRESET',
  'EPIPE',
  // The engine's host name does not resolve (a DOCKER_HOST such as `bogus`).
  'ENOTFOUND',
  'EAI_AGAIN',
])

/** HTTP status of a dockerode error, if it carries one. */
export function engineStatus(error: unknown): number | undefined {
  const status = (error as { statusCode?: unknown })?.statusCode
  return typeof status === 'number' ? status : undefined
}

export function isNotFound(error: unknown): boolean {
  return engineStatus(error) === 404
}

/** The engine has no image of the name a container was created from. */
export function isMissingImage(error: unknown): boolean {
  return engineStatus(error) === 404 && /no such image/i.test(engineMessage(error))
}

/** The engine could not be reached at all (no socket, refused, cut off). */
export function isUnreachable(error: unknown): boolean {
  const code = (error as { code?: unknown })?.code
  return typeof code === 'string' && UNREACHABLE_CODES.has(code)
}

/** The engine is already removing it (an `AutoRemove` container that just stopped): as good as gone. */
export function isBeingRemoved(error: unknown): boolean {
  return engineStatus(error) === 409 && /removal .* in progress/i.test(engineMessage(error))
}

/** What the engine said: its JSON message, else the error's own. */
export function engineMessage(error: unknown): string {
  const json = (error as { json?: { message?: unknown } })?.json
  if (json && typeof json.message === 'string') return json.message
  const reason = (error as { reason?: unknown })?.reason
  const message = (error as { message?: unknown })?.message
  return String(typeof message === 'string' ? message : (reason ?? error))
}

/**
 * Turns a dockerode failure into a cordon error at the backend boundary; the
 * original is kept as `cause`. cordon's own errors pass through unchanged.
 * `engine` names the engine as a person set it (EngineConnection's
 * `description`, e.g. `DOCKER_HOST=tcp://host:2375`).
 */
export function translateEngineError(
  error: unknown,
  backend: string,
  engine: string,
  operation: string,
): Error {
  if (SandboxError.isInstance(error)) return error
  const message = engineMessage(error)
  if (isUnreachable(error)) {
    const code = (error as { code: string }).code
    return new SandboxBackendUnavailableError(
      backend,
      `The Docker Engine at ${engine} is unreachable (${code === 'ENOTFOUND' || code === 'EAI_AGAIN' ? `${code}: its host name does not resolve` : code}). Is dockerd running there, and may this process use it?`,
      { cause: error },
    )
  }
  if (/unknown or invalid runtime name/i.test(message)) {
    return new SandboxBackendUnavailableError(
      backend,
      `The Docker Engine at ${engine} has no "runsc" runtime registered; install gVisor and add it to daemon.json "runtimes"`,
      { cause: error },
    )
  }
  return new SandboxOperationError(operation, message, { cause: error })
}
