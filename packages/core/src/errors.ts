/**
 * The cordon error hierarchy.
 *
 * Every error carries a marker property keyed by a `Symbol.for` symbol, and each
 * class has its own marker. `isInstance` checks the marker instead of the
 * prototype chain, so it keeps working when a host ends up with two copies of
 * `@cordon/core` in its dependency tree (where `instanceof` silently fails).
 * Each subclass must declare its own marker: a subclass that only inherits its
 * parent's would make `Sub.isInstance` true for every sibling.
 */

const MARKER_PREFIX = 'cordon.error'

/**
 * The marker of the error class `name`. A backend's own error classes use
 * this too (exported from the kit as `errorMarker`), so their `isInstance`
 * works across duplicated copies of the backend's package the same way.
 */
export function markerFor(name: string): symbol {
  return Symbol.for(`${MARKER_PREFIX}.${name}`)
}

/** Whether `value` carries `marker` (exported from the kit as `hasErrorMarker`). */
export function hasMarker(value: unknown, marker: symbol): boolean {
  return (
    typeof value === 'object' &&
    value !== null &&
    marker in value &&
    (value as Record<symbol, unknown>)[marker] === true
  )
}

/** Stable, documented error codes. Hosts may switch on these; they never change meaning. */
export type SandboxErrorCode =
  | 'SANDBOX_ERROR'
  | 'BACKEND_NOT_IMPLEMENTED'
  | 'BACKEND_NOT_INSTALLED'
  | 'BACKEND_UNAVAILABLE'
  | 'CONFIG_INVALID'
  | 'LAYOUT_INVALID'
  | 'CONTROL_REFUSED'
  | 'CREATE_TIMEOUT'
  | 'READINESS_FAILED'
  | 'SANDBOX_DESTROYED'
  | 'SANDBOX_PAUSED'
  | 'SANDBOX_NOT_FOUND'
  | 'CREDENTIAL_REFUSED'
  | 'TRANSPORT_FAILED'
  | 'ABORTED'
  | 'PATH_REFUSED'
  | 'FILE_NOT_FOUND'
  | 'FILE_TOO_LARGE'
  | 'HOST_FILE_UNUSABLE'
  | 'IMAGE_PULL_FAILED'
  | 'OPERATION_FAILED'
  | 'SNAPSHOT_NOT_FOUND'
  | 'VOLUME_NOT_FOUND'
  | 'VOLUME_EXISTS'
  | 'VOLUME_IN_USE'

export interface SandboxErrorOptions {
  readonly cause?: unknown
}

const baseMarker = markerFor('SandboxError')

/** Base class of every error cordon throws. */
export class SandboxError extends Error {
  protected readonly [baseMarker] = true
  readonly code: SandboxErrorCode

  constructor(message: string, options: SandboxErrorOptions & { code?: SandboxErrorCode } = {}) {
    super(message, options.cause === undefined ? undefined : { cause: options.cause })
    this.name = 'SandboxError'
    this.code = options.code ?? 'SANDBOX_ERROR'
  }

  static isInstance(value: unknown): value is SandboxError {
    return hasMarker(value, baseMarker)
  }
}

const notImplementedMarker = markerFor('SandboxBackendNotImplementedError')

/**
 * A backend or feature that cordon does not provide. Raised for an unknown tier,
 * runtime or service coming from untyped JavaScript, so an invented config gets a
 * named refusal instead of a provider that confines nothing.
 */
export class SandboxBackendNotImplementedError extends SandboxError {
  protected readonly [notImplementedMarker] = true
  readonly backend: string

  constructor(backend: string, detail?: string, options: SandboxErrorOptions = {}) {
    super(`Sandbox backend "${backend}" is not implemented${detail ? `: ${detail}` : ''}`, {
      ...options,
      code: 'BACKEND_NOT_IMPLEMENTED',
    })
    this.name = 'SandboxBackendNotImplementedError'
    this.backend = backend
  }

  static override isInstance(value: unknown): value is SandboxBackendNotImplementedError {
    return hasMarker(value, notImplementedMarker)
  }
}

const unavailableMarker = markerFor('SandboxBackendUnavailableError')

/** The backend exists but cannot be used right now (engine unreachable, runtime missing). */
export class SandboxBackendUnavailableError extends SandboxError {
  protected readonly [unavailableMarker] = true
  readonly backend: string

  constructor(
    backend: string,
    message: string,
    options: SandboxErrorOptions & { code?: SandboxErrorCode } = {},
  ) {
    super(message, { code: 'BACKEND_UNAVAILABLE', ...options })
    this.name = 'SandboxBackendUnavailableError'
    this.backend = backend
  }

  static override isInstance(value: unknown): value is SandboxBackendUnavailableError {
    return hasMarker(value, unavailableMarker)
  }
}

const notInstalledMarker = markerFor('SandboxBackendNotInstalledError')

/** The chosen backend's package is not installed next to `@cordon/sandbox`. */
export class SandboxBackendNotInstalledError extends SandboxBackendUnavailableError {
  protected readonly [notInstalledMarker] = true
  readonly packageName: string

  constructor(backend: string, packageName: string, options: SandboxErrorOptions = {}) {
    super(
      backend,
      `Sandbox backend "${backend}" needs the package ${packageName}; install it with: npm install ${packageName}`,
      { ...options, code: 'BACKEND_NOT_INSTALLED' },
    )
    this.name = 'SandboxBackendNotInstalledError'
    this.packageName = packageName
  }

  static override isInstance(value: unknown): value is SandboxBackendNotInstalledError {
    return hasMarker(value, notInstalledMarker)
  }
}

/** One problem found while validating a config; `path` locates it in the input. */
export interface SandboxConfigIssue {
  readonly path: string
  readonly message: string
}

const configMarker = markerFor('SandboxConfigValidationError')

/** A config failed validation. Lists every problem found, never only the first. */
export class SandboxConfigValidationError extends SandboxError {
  protected readonly [configMarker] = true
  readonly issues: readonly SandboxConfigIssue[]

  constructor(
    subject: string,
    issues: readonly SandboxConfigIssue[],
    options: SandboxErrorOptions & { code?: SandboxErrorCode } = {},
  ) {
    const lines = issues.map((issue) => `  - ${issue.path || '(root)'}: ${issue.message}`)
    super(
      `Invalid ${subject} (${issues.length} problem${issues.length === 1 ? '' : 's'}):\n${lines.join('\n')}`,
      {
        code: 'CONFIG_INVALID',
        ...options,
      },
    )
    this.name = 'SandboxConfigValidationError'
    this.issues = issues
  }

  static override isInstance(value: unknown): value is SandboxConfigValidationError {
    return hasMarker(value, configMarker)
  }
}

const layoutMarker = markerFor('ContainerSandboxLayoutValidationError')

/**
 * A container layout is unusable. `reasons` lists every problem of the layout
 * (one line each, `path: message`, the path within the layout), as the
 * reference's error did, so a host fixes them all in one round; `issues` has
 * the same problems as structured data, located in what was validated.
 *
 * `createSandboxProvider` throws this class whenever the layout has a
 * problem, as the reference did; problems elsewhere in the same config
 * (`alsoInvalid`) are then added to `issues` and named after the reasons in
 * the message, so that one error still reports everything.
 */
export class ContainerSandboxLayoutValidationError extends SandboxConfigValidationError {
  protected readonly [layoutMarker] = true
  readonly reasons: readonly string[]

  constructor(
    reasons: readonly string[],
    options: SandboxErrorOptions & {
      issues?: readonly SandboxConfigIssue[]
      alsoInvalid?: readonly SandboxConfigIssue[]
    } = {},
  ) {
    const also = options.alsoInvalid ?? []
    super(
      'ContainerSandboxLayout',
      [...(options.issues ?? reasons.map((reason) => ({ path: '', message: reason }))), ...also],
      { ...(options.cause === undefined ? {} : { cause: options.cause }), code: 'LAYOUT_INVALID' },
    )
    this.name = 'ContainerSandboxLayoutValidationError'
    this.reasons = [...reasons]
    this.message = `Invalid ContainerSandboxLayout: ${reasons.join('; ')}${
      also.length === 0
        ? ''
        : ` (the rest of the config is invalid too: ${also.map(issueLine).join('; ')})`
    }`
  }

  /**
   * One error for every problem found, each reason `path: message`. `at`
   * locates the layout in a larger config (`layout`), for `issues` only.
   */
  static fromIssues(
    issues: readonly SandboxConfigIssue[],
    context: { readonly at?: string; readonly alsoInvalid?: readonly SandboxConfigIssue[] } = {},
  ): ContainerSandboxLayoutValidationError {
    const { at } = context
    return new ContainerSandboxLayoutValidationError(issues.map(issueLine), {
      issues: at
        ? issues.map((issue) => ({
            path: issue.path ? `${at}.${issue.path}` : at,
            message: issue.message,
          }))
        : issues,
      ...(context.alsoInvalid ? { alsoInvalid: context.alsoInvalid } : {}),
    })
  }

  /** What `JSON.stringify` writes: the reasons survive, unlike an Error's own fields. */
  toJSON(): { name: string; message: string; reasons: readonly string[]; cause?: unknown } {
    return {
      name: this.name,
      message: this.message,
      reasons: this.reasons,
      ...(this.cause === undefined ? {} : { cause: this.cause }),
    }
  }

  static override isInstance(value: unknown): value is ContainerSandboxLayoutValidationError {
    return hasMarker(value, layoutMarker)
  }
}

function issueLine(issue: SandboxConfigIssue): string {
  return issue.path ? `${issue.path}: ${issue.message}` : issue.message
}

const refusedMarker = markerFor('SandboxControlRefusedError')

/**
 * A control was asked for that this backend cannot enforce. cordon refuses rather
 * than accept a limit or policy and silently ignore it.
 */
export class SandboxControlRefusedError extends SandboxError {
  protected readonly [refusedMarker] = true
  /** The control that was refused, e.g. `egress.static`, `memoryLimitMb`. */
  readonly control: string
  /** The backend that refused it, as `tier:runtime`. */
  readonly backend: string
  readonly reason: string

  constructor(control: string, backend: string, reason: string, options: SandboxErrorOptions = {}) {
    super(`Backend "${backend}" cannot enforce "${control}": ${reason}`, {
      ...options,
      code: 'CONTROL_REFUSED',
    })
    this.name = 'SandboxControlRefusedError'
    this.control = control
    this.backend = backend
    this.reason = reason
  }

  static override isInstance(value: unknown): value is SandboxControlRefusedError {
    return hasMarker(value, refusedMarker)
  }
}

const timeoutMarker = markerFor('SandboxCreateTimeoutError')

/** `create()` did not produce an exec-ready sandbox within its budget. */
export class SandboxCreateTimeoutError extends SandboxError {
  protected readonly [timeoutMarker] = true
  readonly timeoutMs: number
  /** The phase that was under way when the budget ran out. */
  readonly phase: string | undefined

  constructor(timeoutMs: number, phase?: string, options: SandboxErrorOptions = {}) {
    super(`Sandbox was not ready within ${timeoutMs} ms${phase ? ` (during ${phase})` : ''}`, {
      ...options,
      code: 'CREATE_TIMEOUT',
    })
    this.name = 'SandboxCreateTimeoutError'
    this.timeoutMs = timeoutMs
    this.phase = phase
  }

  static override isInstance(value: unknown): value is SandboxCreateTimeoutError {
    return hasMarker(value, timeoutMarker)
  }
}

const readinessMarker = markerFor('SandboxReadinessError')

/** The sandbox was started but never became able to run a command. */
export class SandboxReadinessError extends SandboxError {
  protected readonly [readinessMarker] = true
  readonly sandboxId: string | undefined

  constructor(message: string, sandboxId?: string, options: SandboxErrorOptions = {}) {
    super(message, { ...options, code: 'READINESS_FAILED' })
    this.name = 'SandboxReadinessError'
    this.sandboxId = sandboxId
  }

  static override isInstance(value: unknown): value is SandboxReadinessError {
    return hasMarker(value, readinessMarker)
  }
}

const destroyedMarker = markerFor('SandboxDestroyedError')

/** An operation was attempted on a sandbox that has been destroyed. */
export class SandboxDestroyedError extends SandboxError {
  protected readonly [destroyedMarker] = true
  readonly sandboxId: string

  constructor(sandboxId: string, options: SandboxErrorOptions = {}) {
    super(`Sandbox ${sandboxId} has been destroyed`, { ...options, code: 'SANDBOX_DESTROYED' })
    this.name = 'SandboxDestroyedError'
    this.sandboxId = sandboxId
  }

  static override isInstance(value: unknown): value is SandboxDestroyedError {
    return hasMarker(value, destroyedMarker)
  }
}

const pausedMarker = markerFor('SandboxPausedError')

/**
 * An operation that needs the sandbox's processes (a command, a file
 * operation, a terminal, a forward) was called while the sandbox is paused.
 * Nothing was sent to the sandbox; call `resume()` and try again.
 */
export class SandboxPausedError extends SandboxError {
  protected readonly [pausedMarker] = true
  readonly sandboxId: string
  /** The refused operation, e.g. `exec`, `readFile`. */
  readonly operation: string

  constructor(sandboxId: string, operation: string, options: SandboxErrorOptions = {}) {
    super(`${operation} refused: sandbox ${sandboxId} is paused; call resume() first`, {
      ...options,
      code: 'SANDBOX_PAUSED',
    })
    this.name = 'SandboxPausedError'
    this.sandboxId = sandboxId
    this.operation = operation
  }

  static override isInstance(value: unknown): value is SandboxPausedError {
    return hasMarker(value, pausedMarker)
  }
}

const snapshotNotFoundMarker = markerFor('SandboxSnapshotNotFoundError')

/**
 * No snapshot of that id is kept where the backend looks (never taken,
 * removed, or collected past its retention).
 */
export class SandboxSnapshotNotFoundError extends SandboxError {
  protected readonly [snapshotNotFoundMarker] = true
  readonly snapshotId: string
  readonly backend: string

  constructor(snapshotId: string, backend: string, options: SandboxErrorOptions = {}) {
    super(`${backend} keeps no snapshot ${JSON.stringify(snapshotId)}`, {
      ...options,
      code: 'SNAPSHOT_NOT_FOUND',
    })
    this.name = 'SandboxSnapshotNotFoundError'
    this.snapshotId = snapshotId
    this.backend = backend
  }

  static override isInstance(value: unknown): value is SandboxSnapshotNotFoundError {
    return hasMarker(value, snapshotNotFoundMarker)
  }
}

const sandboxNotFoundMarker = markerFor('SandboxNotFoundError')

/**
 * `provider.connect(id)` found no sandbox with that id that this provider
 * may reach: it never existed, it ended (its lifetime ran out, it was
 * destroyed), or it was not created `detached`.
 */
export class SandboxNotFoundError extends SandboxError {
  protected readonly [sandboxNotFoundMarker] = true
  readonly sandboxId: string

  constructor(sandboxId: string, reason: string, options: SandboxErrorOptions = {}) {
    super(`No sandbox ${sandboxId} to connect to: ${reason}`, {
      ...options,
      code: 'SANDBOX_NOT_FOUND',
    })
    this.name = 'SandboxNotFoundError'
    this.sandboxId = sandboxId
  }

  static override isInstance(value: unknown): value is SandboxNotFoundError {
    return hasMarker(value, sandboxNotFoundMarker)
  }
}

const credentialMarker = markerFor('SandboxCredentialRefusedError')

/**
 * `provider.connect(id)` was refused: no credential for the sandbox was given
 * or found in the credential store, the credential is not one cordon made or
 * names another sandbox, or the sandbox's agent refused it (it proves the
 * host holds the secret the creator held, on every connection).
 */
export class SandboxCredentialRefusedError extends SandboxError {
  protected readonly [credentialMarker] = true
  readonly sandboxId: string

  constructor(sandboxId: string, reason: string, options: SandboxErrorOptions = {}) {
    super(`Connecting to sandbox ${sandboxId} refused: ${reason}`, {
      ...options,
      code: 'CREDENTIAL_REFUSED',
    })
    this.name = 'SandboxCredentialRefusedError'
    this.sandboxId = sandboxId
  }

  static override isInstance(value: unknown): value is SandboxCredentialRefusedError {
    return hasMarker(value, credentialMarker)
  }
}

const transportMarker = markerFor('SandboxTransportError')

/** Talking to the engine, control plane or in-sandbox agent failed. */
export class SandboxTransportError extends SandboxError {
  protected readonly [transportMarker] = true
  /** What was being talked to (a socket path, URL or agent address), when known. */
  readonly endpoint: string | undefined

  constructor(message: string, endpoint?: string, options: SandboxErrorOptions = {}) {
    super(message, { ...options, code: 'TRANSPORT_FAILED' })
    this.name = 'SandboxTransportError'
    this.endpoint = endpoint
  }

  static override isInstance(value: unknown): value is SandboxTransportError {
    return hasMarker(value, transportMarker)
  }
}

const abortedMarker = markerFor('SandboxAbortedError')

/** The caller's AbortSignal fired. `cause` holds the signal's reason. */
export class SandboxAbortedError extends SandboxError {
  protected readonly [abortedMarker] = true
  readonly operation: string

  constructor(operation: string, options: SandboxErrorOptions = {}) {
    super(`${operation} was aborted`, { ...options, code: 'ABORTED' })
    this.name = 'SandboxAbortedError'
    this.operation = operation
  }

  static override isInstance(value: unknown): value is SandboxAbortedError {
    return hasMarker(value, abortedMarker)
  }
}

const pathMarker = markerFor('SandboxPathError')

/** A file path outside what the sandbox lets the host read or write. */
export class SandboxPathError extends SandboxError {
  protected readonly [pathMarker] = true
  readonly path: string
  readonly reason: string

  constructor(path: string, reason: string, options: SandboxErrorOptions = {}) {
    super(`Path "${path}" refused: ${reason}`, { ...options, code: 'PATH_REFUSED' })
    this.name = 'SandboxPathError'
    this.path = path
    this.reason = reason
  }

  static override isInstance(value: unknown): value is SandboxPathError {
    return hasMarker(value, pathMarker)
  }
}

const notFoundMarker = markerFor('SandboxFileNotFoundError')

/** A file the host asked to read does not exist (or is not a regular file). */
export class SandboxFileNotFoundError extends SandboxError {
  protected readonly [notFoundMarker] = true
  readonly path: string

  /**
   * `reason` says what is there instead when something is: "is a directory",
   * "is not a regular file".
   */
  constructor(path: string, options: SandboxErrorOptions & { readonly reason?: string } = {}) {
    const { reason, ...rest } = options
    super(
      reason ? `Not a file in sandbox: ${path} ${reason}` : `No such file in sandbox: ${path}`,
      { ...rest, code: 'FILE_NOT_FOUND' },
    )
    this.name = 'SandboxFileNotFoundError'
    this.path = path
  }

  static override isInstance(value: unknown): value is SandboxFileNotFoundError {
    return hasMarker(value, notFoundMarker)
  }
}

const hostFileMarker = markerFor('SandboxHostFileError')

/**
 * A host file named as a batch write's source (`hostPath`) cannot be
 * copied: it is missing, unreadable or not a regular file (found before
 * anything was written), or its size changed while it was being sent (the
 * files before it are written, it is not). `reason` says which.
 */
export class SandboxHostFileError extends SandboxError {
  protected readonly [hostFileMarker] = true
  readonly hostPath: string
  readonly reason: string

  constructor(hostPath: string, reason: string, options: SandboxErrorOptions = {}) {
    super(`Host file "${hostPath}" cannot be copied into the sandbox: ${reason}`, {
      ...options,
      code: 'HOST_FILE_UNUSABLE',
    })
    this.name = 'SandboxHostFileError'
    this.hostPath = hostPath
    this.reason = reason
  }

  static override isInstance(value: unknown): value is SandboxHostFileError {
    return hasMarker(value, hostFileMarker)
  }
}

const tooLargeMarker = markerFor('SandboxFileTooLargeError')

/**
 * A file is larger than a whole-file read may bring into host memory
 * (`maxBytes`). Nothing was read; `readFileStream` reads it in bounded pieces.
 */
export class SandboxFileTooLargeError extends SandboxError {
  protected readonly [tooLargeMarker] = true
  readonly path: string
  readonly size: number
  readonly maxBytes: number

  constructor(path: string, size: number, maxBytes: number, options: SandboxErrorOptions = {}) {
    super(
      `File ${path} holds ${size} bytes, more than the ${maxBytes} a whole-file read takes; read it with readFileStream or raise maxBytes`,
      { ...options, code: 'FILE_TOO_LARGE' },
    )
    this.name = 'SandboxFileTooLargeError'
    this.path = path
    this.size = size
    this.maxBytes = maxBytes
  }

  static override isInstance(value: unknown): value is SandboxFileTooLargeError {
    return hasMarker(value, tooLargeMarker)
  }
}

const imagePullMarker = markerFor('SandboxImagePullError')

/**
 * The image a sandbox needs is not on the engine and could not be pulled: the
 * registry does not have it, refused the credentials (or their absence), or
 * could not be reached. `reason` is the engine's or registry's own words;
 * credentials never appear in the message or any field.
 */
export class SandboxImagePullError extends SandboxError {
  protected readonly [imagePullMarker] = true
  /** The image as the config names it, e.g. `node:20-slim`. */
  readonly image: string
  /** The registry it was pulled from, e.g. `registry.example.com`, `127.0.0.1:5000`. */
  readonly registry: string
  readonly backend: string
  readonly reason: string

  constructor(
    image: string,
    registry: string,
    backend: string,
    reason: string,
    options: SandboxErrorOptions = {},
  ) {
    super(`Could not pull image "${image}" from ${registry}: ${reason}`, {
      ...options,
      code: 'IMAGE_PULL_FAILED',
    })
    this.name = 'SandboxImagePullError'
    this.image = image
    this.registry = registry
    this.backend = backend
    this.reason = reason
  }

  static override isInstance(value: unknown): value is SandboxImagePullError {
    return hasMarker(value, imagePullMarker)
  }
}

const operationMarker = markerFor('SandboxOperationError')

/** A sandbox operation failed for a reason the backend reported; details in `cause`. */
export class SandboxOperationError extends SandboxError {
  protected readonly [operationMarker] = true
  readonly operation: string

  constructor(operation: string, message: string, options: SandboxErrorOptions = {}) {
    super(`${operation} failed: ${message}`, { ...options, code: 'OPERATION_FAILED' })
    this.name = 'SandboxOperationError'
    this.operation = operation
  }

  static override isInstance(value: unknown): value is SandboxOperationError {
    return hasMarker(value, operationMarker)
  }
}

/** Throws {@link SandboxAbortedError} if the signal has already fired. */
export function throwIfAborted(signal: AbortSignal | undefined, operation: string): void {
  if (signal?.aborted) throw new SandboxAbortedError(operation, { cause: signal.reason })
}

/**
 * What an operation that failed after its caller's `signal` fired throws:
 * the failure a backend saw then (an engine call cut off, a stream ended
 * under it) is the abort's doing, so it is a {@link SandboxAbortedError}
 * with that failure as its cause. A refusal or a validation error, which
 * the abort did not cause, stays as it is.
 */
export function failureAfterAbort(
  error: unknown,
  signal: AbortSignal | undefined,
  operation: string,
): unknown {
  if (!signal?.aborted) return error
  // A step's own abort (a fork's snapshot) is named as the operation the caller asked for.
  if (SandboxAbortedError.isInstance(error) && error.operation === operation) return error
  if (
    SandboxControlRefusedError.isInstance(error) ||
    SandboxConfigValidationError.isInstance(error) ||
    SandboxDestroyedError.isInstance(error)
  ) {
    return error
  }
  return new SandboxAbortedError(operation, { cause: signal.reason })
}

const volumeMarker = markerFor('SandboxVolumeError')

/** Why a volume operation or a mount of a volume was refused. */
export type SandboxVolumeErrorReason = 'not-found' | 'exists' | 'in-use'

const VOLUME_CODES: Record<SandboxVolumeErrorReason, SandboxErrorCode> = {
  'not-found': 'VOLUME_NOT_FOUND',
  exists: 'VOLUME_EXISTS',
  'in-use': 'VOLUME_IN_USE',
}

/**
 * A named volume cannot be used as asked: there is no cordon volume of that
 * name (`not-found`: a layout names a volume nobody created, or it was
 * removed), the name is taken (`exists`), or live sandboxes mount it in a
 * way that excludes the operation (`in-use`: removal while mounted, a
 * second read-write mount, a read-only mount beside a read-write one;
 * `users` names them). Nothing was changed.
 */
export class SandboxVolumeError extends SandboxError {
  protected readonly [volumeMarker] = true
  readonly volume: string
  readonly reason: SandboxVolumeErrorReason
  /** For `in-use`: the live sandboxes that mount it, and how. */
  readonly users: readonly {
    readonly sandboxId: string
    readonly access: 'read-write' | 'read-only'
  }[]

  constructor(
    volume: string,
    reason: SandboxVolumeErrorReason,
    message: string,
    options: SandboxErrorOptions & {
      users?: readonly { sandboxId: string; access: 'read-write' | 'read-only' }[]
    } = {},
  ) {
    super(`Volume ${JSON.stringify(volume)}: ${message}`, {
      ...(options.cause === undefined ? {} : { cause: options.cause }),
      code: VOLUME_CODES[reason],
    })
    this.name = 'SandboxVolumeError'
    this.volume = volume
    this.reason = reason
    this.users = options.users ?? []
  }

  static override isInstance(value: unknown): value is SandboxVolumeError {
    return hasMarker(value, volumeMarker)
  }
}
