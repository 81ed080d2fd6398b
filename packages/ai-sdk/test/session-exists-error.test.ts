import { HarnessCapabilityUnsupportedError, HarnessError } from '@ai-sdk/harness'
import { describe, expect, it } from 'vitest'
import { CordonHarnessSessionExistsError } from '../src/index.js'

describe('CordonHarnessSessionExistsError', () => {
  it('is a HarnessError that keeps the session id, and is told apart from its siblings', () => {
    const error = new CordonHarnessSessionExistsError({ sessionId: 'task-1', providerId: 'p' })
    expect(error).toBeInstanceOf(HarnessError)
    expect(HarnessError.isInstance(error)).toBe(true)
    expect(error.sessionId).toBe('task-1')
    expect(error.name).toBe('CordonHarnessSessionExistsError')
    expect(error.message).toContain('"task-1"')
    expect(CordonHarnessSessionExistsError.isInstance(error)).toBe(true)
    expect(
      CordonHarnessSessionExistsError.isInstance(
        new HarnessCapabilityUnsupportedError({ message: 'x' }),
      ),
    ).toBe(false)
    expect(CordonHarnessSessionExistsError.isInstance(new Error('x'))).toBe(false)
    expect(CordonHarnessSessionExistsError.isInstance(null)).toBe(false)
    expect(CordonHarnessSessionExistsError.isInstance('task-1')).toBe(false)
  })
})
