import { SandboxError } from './errors.js'

/** An error as events carry it: its name, cordon's code if it has one, and its message. */
export function describeError(error: unknown): { name: string; code?: string; message: string } {
  if (SandboxError.isInstance(error))
    return { name: error.name, code: error.code, message: error.message }
  if (error instanceof Error) return { name: error.name, message: error.message }
  return { name: 'Error', message: String(error) }
}
