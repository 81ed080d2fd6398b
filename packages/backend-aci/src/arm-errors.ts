import {
  SandboxBackendUnavailableError,
  type SandboxErrorOptions,
  SandboxOperationError,
} from '@cordon/core'
import { errorMarker, hasErrorMarker } from '@cordon/core/backend'
import { BACKEND_NAME } from './aci-defaults.js'

/**
 * What ARM answered to one request, kept as the `cause` of the cordon error
 * a failure becomes. Carries what Azure support asks for (the request id) and
 * never the response body, which for a claim holds the agent secret.
 */
export class ArmRequestFailure extends Error {
  readonly status: number
  /** ARM's error code, e.g. `TooManyRequests`, `Conflict`, `AuthorizationFailed`. */
  readonly code: string
  readonly requestId: string | undefined
  readonly method: string
  /** The request URL without its query. */
  readonly url: string

  constructor(init: {
    status: number
    code: string
    message: string
    requestId: string | undefined
    method: string
    url: string
  }) {
    super(`${init.method} ${init.url}: HTTP ${init.status} ${init.code}: ${init.message}`)
    this.name = 'ArmRequestFailure'
    this.status = init.status
    this.code = init.code
    this.requestId = init.requestId
    this.method = init.method
    this.url = init.url
  }
}

/** Core's marker scheme, so `isInstance` works across duplicated copies of this package. */
const authorizationMarker = errorMarker('ArmAuthorizationError')

/**
 * ARM refused the caller (401: the token from `getArmToken` is missing,
 * expired or for another audience; 403: the identity lacks a role on the
 * resource). Retrying does not help; fix the identity or its role assignment.
 */
export class ArmAuthorizationError extends SandboxBackendUnavailableError {
  protected readonly [authorizationMarker] = true
  readonly status: number
  readonly armCode: string
  readonly requestId: string | undefined

  constructor(failure: ArmRequestFailure, options: SandboxErrorOptions = {}) {
    super(
      BACKEND_NAME,
      failure.status === 401
        ? `Azure Resource Manager did not accept the token from getArmToken() (${failure.code}); it must be an unexpired token for Azure Resource Manager`
        : `the identity behind getArmToken() may not ${failure.method} ${failure.url} (${failure.code}); give it the roles listed in the @cordon/backend-aci README`,
      { cause: options.cause ?? failure },
    )
    this.name = 'ArmAuthorizationError'
    this.status = failure.status
    this.armCode = failure.code
    this.requestId = failure.requestId
  }

  static override isInstance(value: unknown): value is ArmAuthorizationError {
    return hasErrorMarker(value, authorizationMarker)
  }
}

const conflictMarker = errorMarker('ArmConflictError')

/**
 * ARM answered 409: the container group exists already or another operation
 * holds it. Not retried: a claim must create a new group, and a conflicting
 * operation is someone else's.
 */
export class ArmConflictError extends SandboxOperationError {
  protected readonly [conflictMarker] = true
  readonly status: number
  readonly armCode: string
  readonly requestId: string | undefined
  /** The resource the conflicting request was for. */
  readonly resourceUrl: string

  constructor(operation: string, failure: ArmRequestFailure, options: SandboxErrorOptions = {}) {
    super(
      operation,
      `Azure Resource Manager reported a conflict on ${failure.url}: ${failure.code}: ${failure.message}`,
      {
        cause: options.cause ?? failure,
      },
    )
    this.name = 'ArmConflictError'
    this.status = failure.status
    this.armCode = failure.code
    this.requestId = failure.requestId
    this.resourceUrl = failure.url
  }

  static override isInstance(value: unknown): value is ArmConflictError {
    return hasErrorMarker(value, conflictMarker)
  }
}
