import { describe, expect, it } from 'vitest'
import {
  ContainerSandboxLayoutValidationError,
  SandboxControlRefusedError,
  SandboxTransportError,
  serializeSandboxError,
} from '../src/index.js'

describe('serializeSandboxError', () => {
  it('keeps name, message, code, structured fields and the cause chain', () => {
    const error = new SandboxTransportError('agent closed', 'tcp://10.0.0.4:7070', {
      cause: new SandboxControlRefusedError(
        'egress.static',
        'container:aci-standby-pool',
        'no gateway',
        {
          cause: new TypeError('inner'),
        },
      ),
    })
    const out = serializeSandboxError(error)
    expect(out).toMatchObject({
      name: 'SandboxTransportError',
      message: 'agent closed',
      code: 'TRANSPORT_FAILED',
      endpoint: 'tcp://10.0.0.4:7070',
      cause: {
        name: 'SandboxControlRefusedError',
        code: 'CONTROL_REFUSED',
        control: 'egress.static',
        backend: 'container:aci-standby-pool',
        cause: { name: 'TypeError', message: 'inner' },
      },
    })
    expect(typeof out.stack).toBe('string')
  })

  it('survives JSON and structuredClone, including cycles and unclonable values', () => {
    const error = new SandboxTransportError('loop') as SandboxTransportError &
      Record<string, unknown>
    const self: Record<string, unknown> = { name: 'holder' }
    self.self = self
    error.extra = {
      fn: () => 1,
      sym: Symbol('s'),
      big: 10n,
      self,
      when: new Date(0),
      bytes: new Uint8Array(3),
    }
    ;(error as { cause?: unknown }).cause = error
    const out = serializeSandboxError(error)
    const viaJson = JSON.parse(JSON.stringify(out))
    const viaClone = structuredClone(out)
    expect(viaJson).toEqual(viaClone)
    expect(viaJson.extra.fn).toBe('[function fn]')
    expect(viaJson.extra.big).toBe('10n')
    expect(viaJson.extra.self.self).toBe('[circular]')
    expect(viaJson.extra.when).toBe('1970-01-01T00:00:00.000Z')
    expect(viaJson.cause.name).toBe('CircularReference')
  })

  it("describes thrown non-errors and non-error causes in the reference's typed envelopes", () => {
    expect(serializeSandboxError('boom')).toEqual({ name: 'NonError', message: 'boom' })
    expect(serializeSandboxError(undefined)).toEqual({ name: 'NonError', message: 'undefined' })
    expect(serializeSandboxError(null)).toEqual({ name: 'NonError', message: 'null' })
    expect(serializeSandboxError(42)).toEqual({ name: 'NonError', message: '42' })
    expect(serializeSandboxError({ a: 1 })).toEqual({ name: 'NonError', message: '{"a":1}' })
    const causes: Array<[unknown, string]> = [
      [() => 1, 'Function'],
      [Symbol('s'), 'Symbol'],
      [10n, 'BigInt'],
      [Number.NaN, 'NonFiniteNumber'],
      [Number.POSITIVE_INFINITY, 'NonFiniteNumber'],
      ['text', 'NonError'],
    ]
    for (const [cause, name] of causes) {
      const out = serializeSandboxError(new Error('outer', { cause }))
      expect(out.cause?.name).toBe(name)
      expect(typeof out.cause?.message).toBe('string')
      expect(structuredClone(out)).toEqual(JSON.parse(JSON.stringify(out)))
    }
  })

  it('encodes a function cause as exactly the reference does, whatever its name', () => {
    function namedHelper(): void {}
    for (const fn of [namedHelper, () => 1, class Thing {}]) {
      expect(serializeSandboxError(new Error('outer', { cause: fn })).cause).toEqual({
        name: 'Function',
        message: '[function]',
      })
      expect(serializeSandboxError(fn)).toEqual({ name: 'Function', message: '[function]' })
    }
  })

  it("copies the layout error's reasons", () => {
    const out = serializeSandboxError(new ContainerSandboxLayoutValidationError(['outputs: bad']))
    expect(out.reasons).toEqual(['outputs: bad'])
    expect(out.name).toBe('ContainerSandboxLayoutValidationError')
  })

  it('walks a deep cause chain in full and replaces a cycle at any depth', () => {
    let error: Error = new Error('root')
    for (let i = 0; i < 50; i++) error = new Error(`level ${i}`, { cause: error })
    let depth = 0
    for (let node = serializeSandboxError(error); node.cause; node = node.cause) depth++
    expect(depth).toBe(50)
    const a = new Error('a')
    const b = new Error('b', { cause: a })
    ;(a as { cause?: unknown }).cause = b
    expect(serializeSandboxError(a).cause?.cause).toEqual({
      name: 'CircularReference',
      message: '[circular]',
    })
  })
})
