import { describe, expect, it } from 'vitest'
import { backgroundSweep, removeEach } from '../src/background-sweep.js'
import { collectGarbage } from './collect-garbage.js'

const tick = () => new Promise((resolve) => setTimeout(resolve, 0))

describe('backgroundSweep', () => {
  it('runs once when it succeeds, however often it is asked', async () => {
    let runs = 0
    const sweep = backgroundSweep(async () => {
      runs++
    }, 1_000)
    sweep.run()
    sweep.run()
    await tick()
    sweep.run()
    await tick()
    expect(runs).toBe(1)
    await sweep.stop()
  })

  it('runs again at the next ask after a run that failed, never two at once', async () => {
    const outcomes = [new Error('control plane down'), undefined]
    let runs = 0
    let release: () => void = () => {}
    const sweep = backgroundSweep(async () => {
      runs++
      await new Promise<void>((resolve) => {
        release = resolve
      })
      const outcome = outcomes.shift()
      if (outcome) throw outcome
    }, 1_000)
    sweep.run()
    sweep.run()
    expect(runs).toBe(1)
    release()
    await tick()
    sweep.run()
    expect(runs).toBe(2)
    release()
    await tick()
    sweep.run()
    expect(runs).toBe(2)
    await sweep.stop()
  })

  it('stop aborts the running sweep, waits for it, and later asks start nothing', async () => {
    let seen: AbortSignal | undefined
    let runs = 0
    const sweep = backgroundSweep(
      (signal) =>
        new Promise((_, reject) => {
          runs++
          seen = signal
          signal.addEventListener('abort', () => reject(signal.reason))
        }),
      60_000,
    )
    sweep.run()
    await sweep.stop()
    expect(seen?.aborted).toBe(true)
    sweep.run()
    expect(runs).toBe(1)
  })

  it("gives each run a signal that aborts at the sweep's time limit", async () => {
    let reason: unknown
    const sweep = backgroundSweep(
      (signal) =>
        new Promise((_, reject) => {
          signal.addEventListener('abort', () => {
            reason = signal.reason
            reject(signal.reason)
          })
        }),
      20,
    )
    sweep.run()
    // The limit must outlive a collection: on Node 20 a composite signal holds its sources
    // weakly, and a timeout signal nothing else held was collected with its timer.
    await new Promise((resolve) => setTimeout(resolve, 0))
    collectGarbage()
    for (let waited = 0; reason === undefined && waited < 2_000; waited += 10)
      await new Promise((resolve) => setTimeout(resolve, 10))
    expect((reason as Error)?.name).toBe('TimeoutError')
    await sweep.stop()
  })
})

describe('removeEach', () => {
  it('removes every item and resolves with their names', async () => {
    const removed: number[] = []
    await expect(
      removeEach(
        [1, 2, 3],
        (n) => `item-${n}`,
        async (n) => {
          removed.push(n)
        },
      ),
    ).resolves.toEqual(['item-1', 'item-2', 'item-3'])
    expect(removed).toEqual([1, 2, 3])
  })

  it('goes on past a failure and then rejects with it', async () => {
    const removed: number[] = []
    const failure = new Error('engine busy')
    await expect(
      removeEach(
        [1, 2, 3],
        (n) => `item-${n}`,
        async (n) => {
          if (n === 1) throw failure
          removed.push(n)
        },
      ),
    ).rejects.toBe(failure)
    expect(removed).toEqual([2, 3])
  })

  it('names each of several failures in one AggregateError', async () => {
    const removed: number[] = []
    const error = await removeEach(
      [1, 2, 3],
      (n) => `item-${n}`,
      async (n) => {
        if (n !== 2) throw new Error(`no ${n}`)
        removed.push(n)
      },
    ).catch((caught: unknown) => caught)
    expect(removed).toEqual([2])
    expect(error).toBeInstanceOf(AggregateError)
    expect((error as AggregateError).errors.map((e: Error) => e.message)).toEqual(['no 1', 'no 3'])
    expect((error as Error).message).toBe(
      '2 of 3 could not be removed: item-1 (no 1); item-3 (no 3)',
    )
  })
})
