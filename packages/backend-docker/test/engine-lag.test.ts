/**
 * The one way the backend waits out the engine's lag behind an end
 * (src/engine-lag.ts), with a stand-in engine: terminals, the filesystem
 * snapshot's programs, the agent socket pipe and a reconnected sandbox's
 * loss all ask through it (their own tests run the real engine).
 */
import { describe, expect, it } from 'vitest'
import { askUntilEnded } from '../src/engine-lag.js'

describe("waiting out the engine's lag behind an end", () => {
  it('asks again while the answer says running, and gives the first that does not', async () => {
    const answers = [true, true, true, false, true]
    let asked = 0
    const last = await askUntilEnded(
      async () => answers[asked++]!,
      (running) => running,
      { forMs: 5_000, everyMs: 10 },
    )
    expect(last).toBe(false)
    expect(asked).toBe(4)
  })

  it('gives the last answer once the time is up', async () => {
    let asked = 0
    const started = Date.now()
    const last = await askUntilEnded(
      async () => ({ running: true, asked: ++asked }),
      (answer) => answer.running,
      { forMs: 200, everyMs: 20 },
    )
    expect(Date.now() - started).toBeGreaterThanOrEqual(200)
    expect(last).toEqual({ running: true, asked })
    expect(asked).toBeGreaterThan(2)
  })

  it('ends with the error of an ask that throws', async () => {
    await expect(
      askUntilEnded(
        async () => {
          throw new Error('engine gone')
        },
        () => true,
        { forMs: 1_000, everyMs: 10 },
      ),
    ).rejects.toThrow('engine gone')
  })
})
