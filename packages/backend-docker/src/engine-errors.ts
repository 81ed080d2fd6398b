import { SandboxBackendUnavailableError, SandboxError, SandboxOperationError } from '@cordon/core'

const UNREACHABLE_CODES = new Set([
  'ECONNREFUSED',
  'ENOENT',
  'EACCES',
  'EHOSTUNREACH',
  'ETIMEDOUT',
  'ECONNRESET',
  'EPIPE',
])

/** HTTP status of a dockerode error, if it carries one. */
export function engineStatus(error: unknown): number | undefined {
  const status = (error as { statusCode?: unknown })?.statusCode
  return typeof status === 'number' ? status : undefined
}

export function isNotFound(error: unknown): boolean {
  return engineStatus(error) === 404
}

/** The engine is already removing it (an `AutoRemove` container that just stopped): as good as gone. */
export function isBeingRemoved(error: unknown): boolean {
  return engineStatus(error) === 409 && /removal .* in progress/i.test(engineMessage(error))
}

function engineMessage(error: unknown): string {
  const json = (error as { json?: { message?: unknown } })?.json
  if (json && typeof json.message === 'string') return json.message
  const reason = (error as { reason?: unknown })?.reason
  const message = (error as { message?: unknown })?.message
  return String(typeof message === 'string' ? message : (reason ?? error))
}

/**
 * Turns a dockerode failure into a cordon error at the backend boundary; the
 * original is kept as `cause`. cordon's own errors pass through unchanged.
 */
export function translateEngineError(
  error: unknown,
  backend: string,
  endpoint: string,
  operation: string,
): Error {
  if (SandboxError.isInstance(error)) return error
  const code = (error as { code?: unknown })?.code
  const message = engineMessage(error)
  if (typeof code === 'string' && UNREACHABLE_CODES.has(code)) {
    return new SandboxBackendUnavailableError(
      backend,
      `The Docker Engine at ${endpoint} is unreachable (${code}). Is dockerd running, and may this process use its socket?`,
      { cause: error },
    )
  }
  if (/unknown or invalid runtime name/i.test(message)) {
    return new SandboxBackendUnavailableError(
      backend,
      `The Docker Engine at ${endpoint} has no "runsc" runtime registered; install gVisor and add it to daemon.json "runtimes"`,
      { cause: error },
    )
  }
  if (engineStatus(error) === 404 && /no such image/i.test(message)) {
    return new SandboxBackendUnavailableError(
      backend,
      `Image not found on the engine at ${endpoint}: ${message}`,
      { cause: error },
    )
  }
  return new SandboxOperationError(operation, message, { cause: error })
}
