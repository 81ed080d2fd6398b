/**
 * Turns any thrown value into plain data that survives `JSON.stringify` and
 * `structuredClone` (for logs, worker messages and RPC replies). Structured fields
 * of cordon errors are kept; the `cause` chain is followed; cycles and values
 * that cannot be cloned (functions, symbols, bigints, class instances) are
 * replaced by descriptions rather than throwing.
 */
export interface SerializedSandboxError {
  readonly name: string
  readonly message: string
  readonly code?: string
  readonly stack?: string
  readonly cause?: SerializedSandboxError | SerializedValue
  readonly [field: string]: unknown
}

export type SerializedValue =
  | string
  | number
  | boolean
  | null
  | readonly SerializedValue[]
  | { readonly [key: string]: SerializedValue }

const MAX_DEPTH = 8
const SKIPPED_FIELDS = new Set(['name', 'message', 'stack', 'cause'])

export function serializeSandboxError(error: unknown): SerializedSandboxError {
  const seen = new WeakSet<object>()
  const result = serializeThrown(error, seen, 0)
  if (typeof result === 'object' && result !== null && 'message' in result) {
    return result as SerializedSandboxError
  }
  return { name: 'NonError', message: describe(error), value: result }
}

function serializeThrown(
  value: unknown,
  seen: WeakSet<object>,
  depth: number,
): SerializedValue | SerializedSandboxError {
  if (!(value instanceof Error) && !looksLikeError(value)) return toPlain(value, seen, depth)
  const error = value as Error & Record<string, unknown>
  if (seen.has(error)) return { name: 'CircularReference', message: '[circular cause]' }
  seen.add(error)
  const out: Record<string, unknown> = {
    name: typeof error.name === 'string' ? error.name : 'Error',
    message: typeof error.message === 'string' ? error.message : describe(error.message),
  }
  if (typeof error.stack === 'string') out.stack = error.stack
  for (const key of Object.keys(error)) {
    if (SKIPPED_FIELDS.has(key)) continue
    out[key] = toPlain(error[key], seen, depth + 1)
  }
  if ('cause' in error && error.cause !== undefined) {
    out.cause =
      depth >= MAX_DEPTH
        ? { name: 'Truncated', message: '[cause chain too deep]' }
        : serializeThrown(error.cause, seen, depth + 1)
  }
  return out as SerializedSandboxError
}

function looksLikeError(value: unknown): boolean {
  return (
    typeof value === 'object' &&
    value !== null &&
    typeof (value as { message?: unknown }).message === 'string' &&
    typeof (value as { name?: unknown }).name === 'string'
  )
}

function toPlain(value: unknown, seen: WeakSet<object>, depth: number): SerializedValue {
  switch (typeof value) {
    case 'string':
    case 'boolean':
      return value
    case 'number':
      return Number.isFinite(value) ? value : String(value)
    case 'undefined':
      return null
    case 'bigint':
      return `${value}n`
    case 'symbol':
      return value.toString()
    case 'function':
      return `[function ${value.name || 'anonymous'}]`
  }
  if (value === null) return null
  if (value instanceof Error || looksLikeError(value)) {
    return serializeThrown(value, seen, depth) as SerializedValue
  }
  const object = value as object
  if (seen.has(object)) return '[circular]'
  if (depth >= MAX_DEPTH) return '[too deep]'
  seen.add(object)
  try {
    if (Array.isArray(object)) return object.map((item) => toPlain(item, seen, depth + 1))
    if (object instanceof Date) return object.toISOString()
    if (ArrayBuffer.isView(object)) return `[${object.constructor.name} ${object.byteLength} bytes]`
    const out: Record<string, SerializedValue> = {}
    for (const [key, item] of Object.entries(object)) out[key] = toPlain(item, seen, depth + 1)
    return out
  } finally {
    seen.delete(object)
  }
}

function describe(value: unknown): string {
  try {
    return typeof value === 'string' ? value : String(value)
  } catch {
    return Object.prototype.toString.call(value)
  }
}
