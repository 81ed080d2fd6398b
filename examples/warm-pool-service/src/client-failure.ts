import { SandboxConfigValidationError, SandboxError } from '@cordon/sandbox'

/** What a task request must look like. */
export const USAGE = 'give {"command": string, "args": string[]}'

/** A request the service cannot act on; its message is for the client. */
export class BadRequest extends Error {}

/**
 * What a client is told about a failure. cordon's errors are typed, so bad
 * input (a refused config) is the client's and says what was wrong; any
 * other failure is the service's, and the client learns only its name and
 * code. Never a stack or a cause: they name the host's files and internals
 * (the service logs the whole error for its operator).
 */
export function clientFailure(error: unknown): {
  status: number
  body: Record<string, unknown>
} {
  if (error instanceof BadRequest) return { status: 400, body: { error: error.message } }
  if (SandboxConfigValidationError.isInstance(error))
    return {
      status: 400,
      body: { error: error.message, name: error.name, code: error.code, issues: error.issues },
    }
  return {
    status: 500,
    body: {
      error: 'the task could not be run',
      ...(SandboxError.isInstance(error) ? { name: error.name, code: error.code } : {}),
    },
  }
}
