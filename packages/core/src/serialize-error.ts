/**
 * Any thrown value as plain data that survives `JSON.stringify`,
 * `structuredClone` and `postMessage` (logs, worker messages, RPC replies),
 * in the reference's envelope: `name`, `message`, `stack`, the layout error's
 * `reasons`, and `cause` serialised the same way, all the way down.
 *
 * cordon's errors also keep their `code` and structured fields (`control`,
 * `backend`, `path`, `issues`, ...), made safe for cloning.
 */
export interface SerializedSandboxError {
  readonly name: string
  readonly message: string
  readonly stack?: string
  readonly reasons?: readonly string[]
  readonly cause?: SerializedSandboxError
  /** The stable code of a cordon error. */
  readonly code?: string
  /** Further structured fields of a cordon error, as plain data. */
  readonly [field: string]: unknown
}

const ENVELOPE_FIELDS = new Set(['name', 'message', 'stack', 'cause', 'reasons'])

export function serializeSandboxError(error: unknown): SerializedSandboxError {
  return serializeThrown(error, new WeakSet())
}

function serializeThrown(value: unknown, seen: WeakSet<object>): SerializedSandboxError {
  if (typeof value === 'object' && value !== null) {
    // The cycle guard, not a depth cap, bounds the walk down the cause chain.
    if (seen.has(value)) return { name: 'CircularReference', message: '[circular]' }
    seen.add(value)
  }
  if (!(value instanceof Error)) return nonError(value)
  const error = value as Error & Record<string, unknown>
  const out: Record<string, unknown> = {
    name: typeof error.name === 'string' ? error.name : 'Error',
    message: typeof error.message === 'string' ? error.message : safeString(error.message),
  }
  if (typeof error.stack === 'string') out.stack = error.stack
  const reasons = error.reasons
  if (Array.isArray(reasons) && reasons.every((reason) => typeof reason === 'string')) {
    out.reasons = [...reasons]
  }
  for (const key of Object.keys(error)) {
    if (ENVELOPE_FIELDS.has(key)) continue
    out[key] = toPlain(error[key], new WeakSet(), 0)
  }
  if ('cause' in error && error.cause !== undefined) out.cause = serializeThrown(error.cause, seen)
  return out as SerializedSandboxError
}

/** A thrown or cause value that is not an Error, as a typed envelope. */
function nonError(value: unknown): SerializedSandboxError {
  switch (typeof value) {
    case 'function':
      // Exactly the reference's envelope: a host may compare it whole.
      return { name: 'Function', message: '[function]' }
    case 'symbol':
      return { name: 'Symbol', message: value.toString() }
    case 'bigint':
      return { name: 'BigInt', message: value.toString() }
    case 'number':
      return Number.isFinite(value)
        ? { name: 'NonError', message: String(value) }
        : { name: 'NonFiniteNumber', message: String(value) }
    case 'string':
      return { name: 'NonError', message: value }
    case 'object':
      return { name: 'NonError', message: value === null ? 'null' : safeJson(value) }
    default:
      return { name: 'NonError', message: String(value) }
  }
}

type Plain = string | number | boolean | null | Plain[] | { [key: string]: Plain }

const MAX_FIELD_DEPTH = 8

/** A structured field of an error as clone-safe data. */
function toPlain(value: unknown, seen: WeakSet<object>, depth: number): Plain {
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
  const object = value as object
  if (seen.has(object)) return '[circular]'
  if (depth >= MAX_FIELD_DEPTH) return '[too deep]'
  seen.add(object)
  try {
    if (object instanceof Error) return serializeThrown(object, new WeakSet()) as Plain
    if (Array.isArray(object)) return object.map((item) => toPlain(item, seen, depth + 1))
    if (object instanceof Date) return object.toISOString()
    if (ArrayBuffer.isView(object)) return `[${object.constructor.name} ${object.byteLength} bytes]`
    const out: Record<string, Plain> = {}
    for (const [key, item] of Object.entries(object)) out[key] = toPlain(item, seen, depth + 1)
    return out
  } finally {
    seen.delete(object)
  }
}

function safeJson(value: object): string {
  try {
    return JSON.stringify(value, (_key, item: unknown) =>
      typeof item === 'bigint' ? `${item}n` : item,
    )
  } catch {
    return safeString(value)
  }
}

function safeString(value: unknown): string {
  try {
    return String(value)
  } catch {
    return Object.prototype.toString.call(value)
  }
}
