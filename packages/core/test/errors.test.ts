import { describe, expect, it } from 'vitest'
import { throwIfAborted } from '../src/backend-kit.js'
import { failureAfterAbort } from '../src/errors.js'
import {
  ContainerSandboxLayoutValidationError,
  SandboxAbortedError,
  SandboxBackendNotImplementedError,
  SandboxBackendNotInstalledError,
  SandboxBackendUnavailableError,
  SandboxConfigValidationError,
  SandboxControlRefusedError,
  SandboxCreateTimeoutError,
  SandboxCredentialRefusedError,
  SandboxDestroyedError,
  SandboxError,
  SandboxFileNotFoundError,
  SandboxImagePullError,
  SandboxNotFoundError,
  SandboxOperationError,
  SandboxPathError,
  SandboxPausedError,
  SandboxReadinessError,
  SandboxSnapshotNotFoundError,
  SandboxTransportError,
  SandboxVolumeError,
} from '../src/index.js'

const cause = new Error('vendor said no')

interface Case {
  readonly make: () => SandboxError
  readonly klass: { isInstance(value: unknown): boolean; name: string }
  readonly parent: { isInstance(value: unknown): boolean }
  readonly code: string
  readonly fields: Record<string, unknown>
}

const cases: Case[] = [
  {
    make: () => new SandboxBackendNotImplementedError('container:lxc', 'nope', { cause }),
    klass: SandboxBackendNotImplementedError,
    parent: SandboxError,
    code: 'BACKEND_NOT_IMPLEMENTED',
    fields: { backend: 'container:lxc' },
  },
  {
    make: () => new SandboxBackendUnavailableError('container:docker', 'engine down', { cause }),
    klass: SandboxBackendUnavailableError,
    parent: SandboxError,
    code: 'BACKEND_UNAVAILABLE',
    fields: { backend: 'container:docker' },
  },
  {
    make: () =>
      new SandboxBackendNotInstalledError('container:docker', '@cordon/backend-docker', { cause }),
    klass: SandboxBackendNotInstalledError,
    parent: SandboxBackendUnavailableError,
    code: 'BACKEND_NOT_INSTALLED',
    fields: { backend: 'container:docker', packageName: '@cordon/backend-docker' },
  },
  {
    make: () =>
      new SandboxConfigValidationError('thing', [{ path: 'a.b', message: 'bad' }], { cause }),
    klass: SandboxConfigValidationError,
    parent: SandboxError,
    code: 'CONFIG_INVALID',
    fields: { issues: [{ path: 'a.b', message: 'bad' }] },
  },
  {
    make: () => new ContainerSandboxLayoutValidationError(['outputs: bad'], { cause }),
    klass: ContainerSandboxLayoutValidationError,
    parent: SandboxConfigValidationError,
    code: 'LAYOUT_INVALID',
    fields: { reasons: ['outputs: bad'] },
  },
  {
    make: () =>
      new SandboxControlRefusedError('egress.static', 'container:docker', 'no gateway', { cause }),
    klass: SandboxControlRefusedError,
    parent: SandboxError,
    code: 'CONTROL_REFUSED',
    fields: { control: 'egress.static', backend: 'container:docker', reason: 'no gateway' },
  },
  {
    make: () => new SandboxCreateTimeoutError(5000, 'readiness', { cause }),
    klass: SandboxCreateTimeoutError,
    parent: SandboxError,
    code: 'CREATE_TIMEOUT',
    fields: { timeoutMs: 5000, phase: 'readiness' },
  },
  {
    make: () => new SandboxReadinessError('agent never answered', 'sbx_x', { cause }),
    klass: SandboxReadinessError,
    parent: SandboxError,
    code: 'READINESS_FAILED',
    fields: { sandboxId: 'sbx_x' },
  },
  {
    make: () => new SandboxDestroyedError('sbx_y', { cause }),
    klass: SandboxDestroyedError,
    parent: SandboxError,
    code: 'SANDBOX_DESTROYED',
    fields: { sandboxId: 'sbx_y' },
  },
  {
    make: () => new SandboxPausedError('sbx_y', 'exec', { cause }),
    klass: SandboxPausedError,
    parent: SandboxError,
    code: 'SANDBOX_PAUSED',
    fields: { sandboxId: 'sbx_y', operation: 'exec' },
  },
  {
    make: () => new SandboxNotFoundError('sbx_y', 'it has ended', { cause }),
    klass: SandboxNotFoundError,
    parent: SandboxError,
    code: 'SANDBOX_NOT_FOUND',
    fields: { sandboxId: 'sbx_y' },
  },
  {
    make: () => new SandboxCredentialRefusedError('sbx_y', 'the agent refused it', { cause }),
    klass: SandboxCredentialRefusedError,
    parent: SandboxError,
    code: 'CREDENTIAL_REFUSED',
    fields: { sandboxId: 'sbx_y' },
  },
  {
    make: () => new SandboxTransportError('socket closed', '/run/agent.sock', { cause }),
    klass: SandboxTransportError,
    parent: SandboxError,
    code: 'TRANSPORT_FAILED',
    fields: { endpoint: '/run/agent.sock' },
  },
  {
    make: () => new SandboxAbortedError('exec', { cause }),
    klass: SandboxAbortedError,
    parent: SandboxError,
    code: 'ABORTED',
    fields: { operation: 'exec' },
  },
  {
    make: () => new SandboxPathError('/etc/passwd', 'outside writable roots', { cause }),
    klass: SandboxPathError,
    parent: SandboxError,
    code: 'PATH_REFUSED',
    fields: { path: '/etc/passwd', reason: 'outside writable roots' },
  },
  {
    make: () => new SandboxFileNotFoundError('/mnt/x', { cause }),
    klass: SandboxFileNotFoundError,
    parent: SandboxError,
    code: 'FILE_NOT_FOUND',
    fields: { path: '/mnt/x' },
  },
  {
    make: () =>
      new SandboxImagePullError(
        'node:20-slim',
        'docker.io',
        'container:docker',
        'manifest unknown',
        { cause },
      ),
    klass: SandboxImagePullError,
    parent: SandboxError,
    code: 'IMAGE_PULL_FAILED',
    fields: {
      image: 'node:20-slim',
      registry: 'docker.io',
      backend: 'container:docker',
      reason: 'manifest unknown',
    },
  },
  {
    make: () => new SandboxOperationError('readFile', 'engine said 500', { cause }),
    klass: SandboxOperationError,
    parent: SandboxError,
    code: 'OPERATION_FAILED',
    fields: { operation: 'readFile' },
  },
  {
    make: () =>
      new SandboxSnapshotNotFoundError('snp_aaaaaaaaaaaaaaaaaaaaaaaaaa', 'container:docker', {
        cause,
      }),
    klass: SandboxSnapshotNotFoundError,
    parent: SandboxError,
    code: 'SNAPSHOT_NOT_FOUND',
    fields: { snapshotId: 'snp_aaaaaaaaaaaaaaaaaaaaaaaaaa', backend: 'container:docker' },
  },
  {
    make: () =>
      new SandboxVolumeError('work', 'in-use', 'mounted', {
        cause,
        users: [{ sandboxId: 'sbx_a', access: 'read-write' }],
      }),
    klass: SandboxVolumeError,
    parent: SandboxError,
    code: 'VOLUME_IN_USE',
    fields: {
      volume: 'work',
      reason: 'in-use',
      users: [{ sandboxId: 'sbx_a', access: 'read-write' }],
    },
  },
]

describe('error hierarchy', () => {
  for (const testCase of cases) {
    describe(testCase.klass.name, () => {
      const error = testCase.make()

      it('is an Error, a SandboxError and its parent', () => {
        expect(error).toBeInstanceOf(Error)
        expect(SandboxError.isInstance(error)).toBe(true)
        expect(testCase.parent.isInstance(error)).toBe(true)
        expect(testCase.klass.isInstance(error)).toBe(true)
        expect(error.name).toBe(testCase.klass.name)
      })

      it('keeps its code, fields and cause', () => {
        expect(error.code).toBe(testCase.code)
        expect(error.cause).toBe(cause)
        expect(error).toMatchObject(testCase.fields)
        expect(error.message.length).toBeGreaterThan(0)
      })

      it('is not matched by sibling classes or by non-errors', () => {
        for (const other of cases) {
          if (other.klass === testCase.klass) continue
          const otherError = other.make()
          // A class only matches its own instances and its subclasses' instances.
          const isSubclass =
            Object.getPrototypeOf(otherError) instanceof
            (testCase.klass as unknown as new () => unknown)
          expect(testCase.klass.isInstance(otherError)).toBe(isSubclass)
        }
        for (const value of [
          null,
          undefined,
          42,
          'error',
          {},
          new Error('plain'),
          { code: testCase.code },
        ]) {
          expect(testCase.klass.isInstance(value)).toBe(false)
        }
      })
    })
  }

  it('isInstance works across copies of the package (marker, not prototype)', () => {
    const foreign = Object.assign(new Error('from another copy'), {
      [Symbol.for('cordon.error.SandboxError')]: true,
      [Symbol.for('cordon.error.SandboxDestroyedError')]: true,
    })
    expect(foreign instanceof SandboxDestroyedError).toBe(false)
    expect(SandboxDestroyedError.isInstance(foreign)).toBe(true)
    expect(SandboxError.isInstance(foreign)).toBe(true)
    expect(SandboxPathError.isInstance(foreign)).toBe(false)
  })

  it('a pull failure names the image and the registry in its message', () => {
    const error = new SandboxImagePullError(
      '127.0.0.1:5000/team/tool:1',
      '127.0.0.1:5000',
      'container:docker',
      'unauthorized: authentication required',
    )
    expect(error.message).toContain('"127.0.0.1:5000/team/tool:1"')
    expect(error.message).toContain('unauthorized')
  })

  it('a refusal names the control and the backend in its message', () => {
    const error = new SandboxControlRefusedError(
      'memoryLimitMb',
      'container:aci-standby-pool',
      'claims cannot change limits',
    )
    expect(error.message).toContain('memoryLimitMb')
    expect(error.message).toContain('container:aci-standby-pool')
  })

  it('the validation message lists every issue', () => {
    const error = new SandboxConfigValidationError('config', [
      { path: 'a', message: 'one' },
      { path: 'b', message: 'two' },
    ])
    expect(error.message).toContain('2 problems')
    expect(error.message).toContain('a: one')
    expect(error.message).toContain('b: two')
  })

  it('throwIfAborted throws SandboxAbortedError with the reason as cause', () => {
    const controller = new AbortController()
    expect(() => throwIfAborted(controller.signal, 'exec')).not.toThrow()
    controller.abort('stop')
    expect(() => throwIfAborted(controller.signal, 'exec')).toThrow(SandboxAbortedError)
    try {
      throwIfAborted(controller.signal, 'exec')
    } catch (error) {
      expect((error as SandboxAbortedError).cause).toBe('stop')
    }
  })

  it('failureAfterAbort names a failure the abort caused as SandboxAbortedError, and leaves the rest', () => {
    const controller = new AbortController()
    const broken = new SandboxOperationError('snapshot', 'the engine call was cut off')
    expect(failureAfterAbort(broken, controller.signal, 'fork')).toBe(broken)
    controller.abort('stop')
    const named = failureAfterAbort(broken, controller.signal, 'fork')
    expect(SandboxAbortedError.isInstance(named)).toBe(true)
    expect(named).toMatchObject({ operation: 'fork', cause: 'stop' })
    // A step's own abort is the caller's operation's; the caller's own abort stays.
    expect(
      failureAfterAbort(new SandboxAbortedError('snapshot'), controller.signal, 'fork'),
    ).toMatchObject({ operation: 'fork' })
    const own = new SandboxAbortedError('fork')
    expect(failureAfterAbort(own, controller.signal, 'fork')).toBe(own)
    // What the abort did not cause stays as it is.
    const refused = new SandboxControlRefusedError('fork', 'container:docker', 'no')
    expect(failureAfterAbort(refused, controller.signal, 'fork')).toBe(refused)
    const invalid = new SandboxConfigValidationError('fork options', [
      { path: 'count', message: 'x' },
    ])
    expect(failureAfterAbort(invalid, controller.signal, 'fork')).toBe(invalid)
  })
})

describe("the reference's layout error", () => {
  it('has its name, message, reasons and toJSON', () => {
    const error = new ContainerSandboxLayoutValidationError(
      ['outputs: missing', 'skills.0.id: bad'],
      {
        cause,
      },
    )
    expect(error).toBeInstanceOf(Error)
    expect(error.name).toBe('ContainerSandboxLayoutValidationError')
    expect(error.message).toBe('Invalid ContainerSandboxLayout: outputs: missing; skills.0.id: bad')
    expect(error.reasons).toEqual(['outputs: missing', 'skills.0.id: bad'])
    expect(JSON.parse(JSON.stringify(error))).toEqual({
      name: 'ContainerSandboxLayoutValidationError',
      message: error.message,
      reasons: ['outputs: missing', 'skills.0.id: bad'],
      cause: {},
    })
    expect(new ContainerSandboxLayoutValidationError(['x']).toJSON()).not.toHaveProperty('cause')
  })
})
