/**
 * A reconnected sandbox whose channel failed asks the engine whether its
 * container ended, and asks again while the engine still says it runs
 * (src/detached-loss.ts): Docker can report a container running for a moment
 * after its agent is gone. The engine is a stand-in here; the reconnect
 * suites (detached.test.ts and its neighbours) run the real one.
 */
import { describe, expect, it } from 'vitest'
import { explainDetachedLoss } from '../src/detached-loss.js'

/** An engine that says `running` for the first `lagging` questions, then what `after` says. */
function engine(lagging: number, after: boolean | undefined) {
  let asked = 0
  return {
    isRunning: async () => (++asked <= lagging ? true : after),
    asked: () => asked,
  }
}

describe("a reconnected sandbox's loss, as its container says it", () => {
  it('is seen even when the engine still says the container runs for a while', async () => {
    const lagging = engine(3, false)
    expect(await explainDetachedLoss(lagging.isRunning, Date.now() + 60_000)).toBe('lost')
    expect(lagging.asked()).toBe(4)
  })

  it('is the lifetime when the container ended at its lifetime’s end', async () => {
    expect(await explainDetachedLoss(engine(0, false).isRunning, Date.now() + 500)).toBe('lifetime')
  })

  it('is a loss when the engine cannot be asked', async () => {
    expect(await explainDetachedLoss(engine(0, undefined).isRunning, Date.now() + 60_000)).toBe(
      'lost',
    )
  })

  it('is nothing when the container goes on running past the wait', async () => {
    const running = engine(Number.POSITIVE_INFINITY, true)
    const started = Date.now()
    expect(await explainDetachedLoss(running.isRunning, Date.now() + 60_000, 300)).toBeUndefined()
    expect(Date.now() - started).toBeGreaterThanOrEqual(300)
    expect(running.asked()).toBeGreaterThan(1)
  })
})
