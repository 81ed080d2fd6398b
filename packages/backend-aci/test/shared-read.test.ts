import { SandboxAbortedError } from '@cordon/core'
import { describe, expect, it } from 'vitest'
import { SharedRead } from '../src/shared-read.js'

function deferred<T>() {
  let resolve!: (value: T) => void
  let reject!: (error: unknown) => void
  const promise = new Promise<T>((res, rej) => {
    resolve = res
    reject = rej
  })
  return { promise, resolve, reject }
}

describe('SharedRead', () => {
  const never = new AbortController().signal

  it('reads once for every caller within the TTL, and again after it', async () => {
    let now = 0
    let reads = 0
    const shared = new SharedRead(
      async () => ++reads,
      60_000,
      () => now,
    )
    expect(await Promise.all([shared.get(never, 'x'), shared.get(never, 'x')])).toEqual([1, 1])
    now = 60_000
    expect(await shared.get(never, 'x')).toBe(1)
    now = 60_001
    expect(await shared.get(never, 'x')).toBe(2)
    expect(reads).toBe(2)
  })

  it('forgets a failed read, so the next caller reads again', async () => {
    let reads = 0
    const shared = new SharedRead(async () => {
      reads++
      if (reads === 1) throw new Error('403')
      return 'ok'
    }, 60_000)
    await expect(shared.get(never, 'x')).rejects.toThrow('403')
    expect(await shared.get(never, 'x')).toBe('ok')
  })

  it("lets one caller give up without failing the others' wait", async () => {
    const read = deferred<string>()
    const shared = new SharedRead(() => read.promise, 60_000)
    const impatient = new AbortController()
    const first = shared.get(impatient.signal, 'create')
    const second = shared.get(never, 'create')
    impatient.abort(new Error('gone'))
    await expect(first).rejects.toSatisfy((error) => SandboxAbortedError.isInstance(error))
    read.resolve('facts')
    expect(await second).toBe('facts')
  })
})
