import { type SandboxConfigIssue, SandboxConfigValidationError } from './errors.js'

/**
 * Checks the options of `snapshot()` or `fork()` before anything is
 * captured: a key neither knows and a `memory` that is not a boolean are
 * refused, every problem named at once, rather than read as "files only"
 * (`{ memory: 'yes' }` took a files-only snapshot before). The count of a
 * fork is checked where it is used.
 */
export function checkCaptureOptions(
  options: unknown,
  call: 'snapshot' | 'fork',
  knownKeys: readonly string[],
): void {
  const issues: SandboxConfigIssue[] = []
  if (typeof options !== 'object' || options === null) {
    issues.push({ path: '', message: `must be an object, got ${describe(options)}` })
  } else {
    for (const key of Object.keys(options))
      if (!knownKeys.includes(key))
        issues.push({
          path: key,
          message: `is not an option of ${call}(); known: ${knownKeys.join(', ')}`,
        })
    const { memory, signal } = options as { memory?: unknown; signal?: unknown }
    if (memory !== undefined && typeof memory !== 'boolean')
      issues.push({ path: 'memory', message: `must be true or false, got ${describe(memory)}` })
    if (signal !== undefined && !(signal instanceof AbortSignal))
      issues.push({ path: 'signal', message: `must be an AbortSignal, got ${describe(signal)}` })
  }
  if (issues.length > 0) throw new SandboxConfigValidationError(`${call} options`, issues)
}

function describe(value: unknown): string {
  if (value === null) return 'null'
  if (typeof value === 'string') return JSON.stringify(value)
  return typeof value === 'object' ? 'an object' : `${typeof value} ${String(value)}`
}
