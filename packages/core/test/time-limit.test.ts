import { describe, expect, it } from 'vitest'
import { timeLimit } from '../src/time-limit.js'
import { collectGarbage } from './collect-garbage.js'

const reasonOf = (signal: AbortSignal) =>
  new Promise<unknown>((resolve) => signal.addEventListener('abort', () => resolve(signal.reason)))

const afterMs = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms))

describe('timeLimit', () => {
  it('aborts with a TimeoutError once its time has passed, even across a garbage collection', async () => {
    const caller = new AbortController()
    const reason = reasonOf(timeLimit(20, caller.signal))
    await afterMs(0)
    collectGarbage()
    const outcome = await Promise.race([reason, afterMs(2_000).then(() => 'never aborted')])
    expect((outcome as Error).name).toBe('TimeoutError')
  })

  it('aborts with the reason of a signal it was given that aborts first', async () => {
    const caller = new AbortController()
    const signal = timeLimit(60_000, undefined, caller.signal)
    const cause = new Error('host going away')
    caller.abort(cause)
    expect(signal.aborted).toBe(true)
    expect(signal.reason).toBe(cause)
  })

  it('is aborted at once when a signal it was given already is', () => {
    const signal = timeLimit(60_000, AbortSignal.abort('gone'))
    expect(signal.aborted).toBe(true)
    expect(signal.reason).toBe('gone')
  })

  it('without signals is the time limit alone', async () => {
    const signal = timeLimit(10)
    expect(((await reasonOf(signal)) as Error).name).toBe('TimeoutError')
  })
})
