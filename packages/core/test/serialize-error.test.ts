import { describe, expect, it } from 'vitest'
import {
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

  it('describes thrown non-errors', () => {
    expect(serializeSandboxError('boom')).toMatchObject({
      name: 'NonError',
      message: 'boom',
      value: 'boom',
    })
    expect(serializeSandboxError(undefined)).toMatchObject({
      name: 'NonError',
      message: 'undefined',
    })
    expect(serializeSandboxError({ name: 'Custom', message: 'duck typed' })).toMatchObject({
      name: 'Custom',
      message: 'duck typed',
    })
  })

  it('bounds very deep cause chains', () => {
    let error: Error = new Error('root')
    for (let i = 0; i < 50; i++) error = new Error(`level ${i}`, { cause: error })
    const text = JSON.stringify(serializeSandboxError(error))
    expect(text).toContain('cause chain too deep')
  })
})
