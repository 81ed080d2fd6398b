import fc from 'fast-check'
import { describe, expect, it } from 'vitest'
import { validatePortForwardRequest } from '../src/backend-kit.js'
import { type SandboxConfigIssue, SandboxConfigValidationError } from '../src/index.js'

/** The issues `validatePortForwardRequest` throws, or none. */
function issuesOf(port: unknown, options: unknown): readonly SandboxConfigIssue[] {
  try {
    validatePortForwardRequest(port, options as never)
    return []
  } catch (error) {
    if (!SandboxConfigValidationError.isInstance(error)) throw error
    expect(error.code).toBe('CONFIG_INVALID')
    return error.issues
  }
}

describe('forwardPort requests', () => {
  it('listens on 127.0.0.1, any free port, by default', () => {
    expect(validatePortForwardRequest(8080, undefined)).toEqual({
      kind: 'tcp',
      hostAddress: '127.0.0.1',
      hostPort: 0,
    })
  })

  it('accepts every spelling of a loopback address without the opt-in', () => {
    for (const hostAddress of [
      '127.0.0.1',
      '127.1.2.3',
      '127.255.255.254',
      '::1',
      '0:0:0:0:0:0:0:1',
      '::ffff:127.0.0.1',
      'localhost',
      'LocalHost',
    ]) {
      expect(validatePortForwardRequest(80, { hostAddress, hostPort: 9000 })).toEqual({
        kind: 'tcp',
        hostAddress,
        hostPort: 9000,
      })
    }
  })

  it('refuses an address beyond the loopback unless exposeBeyondLoopback is set', () => {
    for (const hostAddress of [
      '0.0.0.0',
      '::',
      '10.0.0.1',
      '172.17.0.1',
      '128.0.0.1',
      '::ffff:10.0.0.1',
      'fe80::1',
      'example.com',
      'localhost.example.com',
    ]) {
      const issues = issuesOf(80, { hostAddress })
      expect(issues).toHaveLength(1)
      expect(issues[0]?.path).toBe('hostAddress')
      expect(issues[0]?.message).toContain('exposeBeyondLoopback: true')
      expect(
        validatePortForwardRequest(80, { hostAddress, exposeBeyondLoopback: true }),
      ).toMatchObject({ kind: 'tcp', hostAddress })
    }
    // Saying false is not saying yes.
    expect(issuesOf(80, { hostAddress: '0.0.0.0', exposeBeyondLoopback: false })).toHaveLength(1)
  })

  it('accepts an IPv4 address without the opt-in exactly when it is in 127.0.0.0/8', () => {
    fc.assert(
      fc.property(fc.ipV4(), (hostAddress) => {
        const refused = issuesOf(80, { hostAddress }).length > 0
        expect(refused).toBe(!hostAddress.startsWith('127.'))
      }),
    )
  })

  it('accepts an IPv6 address without the opt-in exactly when it is ::1 or IPv4 loopback mapped', () => {
    fc.assert(
      fc.property(fc.ipV6(), (hostAddress) => {
        // The URL parser's canonical form is an independent oracle for every spelling.
        const canonical = new URL(`http://[${hostAddress}]/`).hostname
        const loopback = canonical === '[::1]' || /^\[::ffff:7f[0-9a-f]{2}:/.test(canonical)
        expect(issuesOf(80, { hostAddress }).length > 0).toBe(!loopback)
      }),
      { numRuns: 2000 },
    )
  })

  it('reports every problem at once', () => {
    const issues = issuesOf('8080', {
      hostAddress: '0.0.0.0',
      hostPort: -1,
      host: '0.0.0.0',
    })
    expect(issues.map((issue) => issue.path).sort()).toEqual([
      '',
      'hostAddress',
      'hostPort',
      'port',
    ])
  })

  it('refuses an empty host address, which Node would bind to every interface', () => {
    expect(issuesOf(80, { hostAddress: '', exposeBeyondLoopback: true })).toEqual([
      { path: 'hostAddress', message: 'must not be empty' },
    ])
  })

  it('refuses bad ports', () => {
    for (const port of [0, 70000, 1.5, Number.NaN, '80']) {
      expect(issuesOf(port, {}).map((issue) => issue.path)).toEqual(['port'])
    }
    for (const hostPort of [-1, 70000, 1.5]) {
      expect(issuesOf(80, { hostPort }).map((issue) => issue.path)).toEqual(['hostPort'])
    }
  })

  it('takes a unix socket with nothing that names a host address or port', () => {
    expect(validatePortForwardRequest(80, { unixSocket: true })).toEqual({ kind: 'unix' })
    const issues = issuesOf(0, { unixSocket: true, hostAddress: '127.0.0.1', hostPort: 9000 })
    expect(issues.map((issue) => issue.path).sort()).toEqual(['', 'port'])
    expect(issues.find((issue) => issue.path === '')?.message).toContain('hostAddress, hostPort')
    expect(issuesOf(80, { unixSocket: true, exposeBeyondLoopback: true })).toHaveLength(1)
  })

  it('refuses options that are not an object', () => {
    expect(issuesOf(80, 'loopback')).toEqual([{ path: 'options', message: 'must be an object' }])
  })
})
