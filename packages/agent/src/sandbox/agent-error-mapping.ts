import {
  SandboxAbortedError,
  SandboxControlRefusedError,
  SandboxError,
  SandboxFileNotFoundError,
  SandboxOperationError,
  SandboxPathError,
  SandboxTransportError,
} from '@cordon/core'
import {
  AgentImpostorError,
  AgentRemoteError,
  AgentRevisionError,
  ConnectionClosedError,
  ConnectionIdleError,
  FrameError,
  ProtocolError,
} from '../protocol/index.js'

/**
 * Translates what the agent protocol throws into cordon's errors, at the
 * boundary where the backend hands results to the host. The original error is
 * always kept as `cause`.
 */
export function toSandboxError(
  error: unknown,
  context: { operation: string; path?: string; endpoint: string; signal?: AbortSignal | undefined },
): SandboxError {
  if (SandboxError.isInstance(error)) return error
  if (context.signal?.aborted)
    return new SandboxAbortedError(context.operation, { cause: context.signal.reason })
  if (error instanceof AgentRevisionError)
    return new SandboxControlRefusedError(context.operation, context.endpoint, error.message, {
      cause: error,
    })
  if (error instanceof AgentRemoteError) {
    switch (error.code) {
      case 'path-refused':
      case 'bad-cwd':
        return new SandboxPathError(context.path ?? '', error.message, { cause: error })
      case 'unsupported':
        return new SandboxControlRefusedError(context.operation, context.endpoint, error.message, {
          cause: error,
        })
      case 'not-found':
        // Not about a file (an unknown process id): the agent's message says what.
        if (context.path === undefined)
          return new SandboxOperationError(context.operation, error.message, { cause: error })
        return new SandboxFileNotFoundError(context.path ?? '', {
          cause: error,
          // The agent says what is there instead, when something is.
          ...(/^is (a directory|not a regular file)$/.test(error.message)
            ? { reason: error.message }
            : {}),
        })
      case 'unauthorized':
        return new SandboxTransportError(
          `the agent refused this host's proof of the sandbox secret`,
          context.endpoint,
          { cause: error },
        )
      default:
        return new SandboxOperationError(context.operation, error.message, { cause: error })
    }
  }
  if (error instanceof AgentImpostorError) {
    return new SandboxTransportError(
      `${context.operation}: the peer did not prove it holds the sandbox secret, so it is not this sandbox's agent; nothing was sent to it (${error.message})`,
      context.endpoint,
      { cause: error },
    )
  }
  if (
    error instanceof ConnectionClosedError ||
    error instanceof ConnectionIdleError ||
    error instanceof FrameError ||
    error instanceof ProtocolError
  ) {
    return new SandboxTransportError(`${context.operation}: ${error.message}`, context.endpoint, {
      cause: error,
    })
  }
  const message = error instanceof Error ? error.message : String(error)
  return new SandboxTransportError(`${context.operation}: ${message}`, context.endpoint, {
    cause: error,
  })
}

/**
 * Whether `error` (as an operation's translation, {@link toSandboxError},
 * left it) says the agent refused the host's secret, or that what answered
 * could not prove it holds the secret: what a backend's `connect()` reports
 * as `SandboxCredentialRefusedError`.
 */
export function refusedTheSecret(error: unknown): boolean {
  if (!SandboxTransportError.isInstance(error)) return false
  // By name: a backend may hold another copy of this package than the client that threw.
  const name = ((error as { cause?: unknown }).cause as { name?: string } | undefined)?.name
  return name === 'AgentRemoteError' || name === 'AgentImpostorError'
}
