import {
  SandboxBackendUnavailableError,
  SandboxError,
  SandboxOperationError,
  serializeSandboxError,
} from '@cordon/core'
import { describe, expect, it } from 'vitest'
import { ArmAuthorizationError, ArmConflictError, ArmRequestFailure } from '../src/index.js'

const failure = (status: number, code: string) =>
  new ArmRequestFailure({
    status,
    code,
    message: 'detail from ARM',
    requestId: '5b1c7f0e-0000-4000-8000-000000000001',
    method: 'PUT',
    url: 'https://management.azure.com/subscriptions/s/resourceGroups/rg/providers/Microsoft.ContainerInstance/containerGroups/cordon-x',
  })

describe('ArmAuthorizationError', () => {
  const error = new ArmAuthorizationError(failure(403, 'AuthorizationFailed'))

  it('is a SandboxBackendUnavailableError naming the backend, with ARM facts and cause', () => {
    expect(SandboxError.isInstance(error)).toBe(true)
    expect(SandboxBackendUnavailableError.isInstance(error)).toBe(true)
    expect(error).toMatchObject({
      name: 'ArmAuthorizationError',
      code: 'BACKEND_UNAVAILABLE',
      backend: 'container:aci-standby-pool',
      status: 403,
      armCode: 'AuthorizationFailed',
      requestId: '5b1c7f0e-0000-4000-8000-000000000001',
    })
    expect(error.cause).toBeInstanceOf(ArmRequestFailure)
    expect(error.message).toContain('roles')
  })

  it('is told apart from its siblings and from non-errors', () => {
    expect(
      ArmAuthorizationError.isInstance(new ArmConflictError('claim', failure(409, 'Conflict'))),
    ).toBe(false)
    expect(ArmAuthorizationError.isInstance(new SandboxBackendUnavailableError('x', 'y'))).toBe(
      false,
    )
    for (const value of [undefined, null, 'ArmAuthorizationError', {}, new Error('x')]) {
      expect(ArmAuthorizationError.isInstance(value)).toBe(false)
    }
  })
})

describe('ArmConflictError', () => {
  const error = new ArmConflictError('claim', failure(409, 'Conflict'))

  it('is a SandboxOperationError with ARM facts and cause', () => {
    expect(SandboxOperationError.isInstance(error)).toBe(true)
    expect(error).toMatchObject({
      name: 'ArmConflictError',
      code: 'OPERATION_FAILED',
      operation: 'claim',
      status: 409,
      armCode: 'Conflict',
      resourceUrl: expect.stringContaining('/containerGroups/cordon-x'),
    })
    expect((error.cause as ArmRequestFailure).status).toBe(409)
  })

  it('is told apart from its siblings and from non-errors', () => {
    expect(
      ArmConflictError.isInstance(
        new ArmAuthorizationError(failure(401, 'InvalidAuthenticationToken')),
      ),
    ).toBe(false)
    expect(ArmConflictError.isInstance(new SandboxOperationError('claim', 'x'))).toBe(false)
    expect(ArmConflictError.isInstance({ code: 'OPERATION_FAILED' })).toBe(false)
  })

  it('survives serialization with its code and cause', () => {
    const serialized = JSON.parse(JSON.stringify(serializeSandboxError(error)))
    expect(serialized).toMatchObject({ name: 'ArmConflictError', code: 'OPERATION_FAILED' })
    expect(JSON.stringify(serialized)).toContain('409')
  })
})

describe('ArmRequestFailure', () => {
  it('carries what support asks for, and never a body', () => {
    const cause = failure(429, 'TooManyRequests')
    expect(cause.message).toBe(
      'PUT https://management.azure.com/subscriptions/s/resourceGroups/rg/providers/Microsoft.ContainerInstance/containerGroups/cordon-x: HTTP 429 TooManyRequests: detail from ARM',
    )
    expect(Object.keys(cause).sort()).toEqual([
      'code',
      'method',
      'name',
      'requestId',
      'status',
      'url',
    ])
  })
})
