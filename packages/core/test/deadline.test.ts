import { describe, expect, it, vi } from 'vitest'
import { sleep, withDeadline } from '../src/backend-kit.js'
import { SandboxAbortedError, SandboxCreateTimeoutError } from '../src/index.js'

const timeoutError = () => new SandboxCreateTimeoutError(50, 'test')

describe('withDeadline', () => {
  it('returns the result of an operation that finishes in time', async () => {
    await expect(
      withDeadline(async () => 7, { timeoutMs: 1000, operation: 'op', onTimeout: timeoutError }),
    ).resolves.toBe(7)
  })

  it('rejects with the timeout error, aborts the operation signal and runs cleanup', async () => {
    const cleanup = vi.fn(async () => {})
    let seen: AbortSignal | undefined
    const promise = withDeadline(
      (signal) => {
        seen = signal
        return new Promise<number>(() => {})
      },
      { timeoutMs: 30, operation: 'op', onTimeout: timeoutError, cleanup, settleMs: 20 },
    )
    await expect(promise).rejects.toBeInstanceOf(SandboxCreateTimeoutError)
    expect(seen?.aborted).toBe(true)
    expect(seen?.reason).toBeInstanceOf(SandboxCreateTimeoutError)
    expect(cleanup).toHaveBeenCalledTimes(1)
  })

  it('runs the cleanup after the operation settled, so it finds what a call in flight made', async () => {
    const order: string[] = []
    const controller = new AbortController()
    const promise = withDeadline(
      async (signal) => {
        // A call that makes something, left to finish: it lands after the abort.
        await sleep(60)
        order.push('made')
        signal.throwIfAborted()
        return 1
      },
      {
        signal: controller.signal,
        operation: 'create',
        onTimeout: timeoutError,
        cleanup: async () => {
          order.push('cleanup')
        },
      },
    )
    setTimeout(() => controller.abort('enough'), 10)
    await expect(promise).rejects.toBeInstanceOf(SandboxAbortedError)
    expect(order).toEqual(['made', 'cleanup'])
  })

  it('cleans up after settleMs when the operation does not settle', async () => {
    const cleanup = vi.fn(async () => {})
    const started = performance.now()
    await expect(
      withDeadline(() => new Promise<number>(() => {}), {
        timeoutMs: 10,
        operation: 'op',
        onTimeout: timeoutError,
        cleanup,
        settleMs: 50,
      }),
    ).rejects.toBeInstanceOf(SandboxCreateTimeoutError)
    expect(cleanup).toHaveBeenCalledTimes(1)
    expect(performance.now() - started).toBeGreaterThanOrEqual(55)
  })

  it('refuses a result that arrives late and disposes of it', async () => {
    const disposed: number[] = []
    let finish: (value: number) => void = () => {}
    const promise = withDeadline(() => new Promise<number>((resolve) => (finish = resolve)), {
      timeoutMs: 20,
      operation: 'op',
      onTimeout: timeoutError,
      disposeLate: async (late) => {
        disposed.push(late)
      },
    })
    await expect(promise).rejects.toBeInstanceOf(SandboxCreateTimeoutError)
    finish(42)
    await sleep(10)
    expect(disposed).toEqual([42])
  })

  it('rejects with SandboxAbortedError when the caller aborts, before or during', async () => {
    const before = new AbortController()
    before.abort('early')
    const operation = vi.fn(async () => 1)
    await expect(
      withDeadline(operation, {
        signal: before.signal,
        operation: 'create',
        onTimeout: timeoutError,
      }),
    ).rejects.toBeInstanceOf(SandboxAbortedError)
    expect(operation).not.toHaveBeenCalled()

    const during = new AbortController()
    const cleanup = vi.fn(async () => {})
    const pending = withDeadline(() => new Promise(() => {}), {
      signal: during.signal,
      operation: 'create',
      onTimeout: timeoutError,
      cleanup,
      settleMs: 20,
    })
    setTimeout(() => during.abort('late'), 10)
    const error = await pending.catch((caught: unknown) => caught)
    expect(SandboxAbortedError.isInstance(error)).toBe(true)
    expect((error as SandboxAbortedError).cause).toBe('late')
    expect(cleanup).toHaveBeenCalledTimes(1)
  })

  it('runs cleanup when the operation itself fails, and keeps the original error', async () => {
    const original = new Error('engine exploded')
    const onCleanupError = vi.fn()
    await expect(
      withDeadline(
        async () => {
          throw original
        },
        {
          timeoutMs: 1000,
          operation: 'op',
          onTimeout: timeoutError,
          cleanup: async () => {
            throw new Error('cleanup also failed')
          },
          onCleanupError,
        },
      ),
    ).rejects.toBe(original)
    expect(onCleanupError).toHaveBeenCalledTimes(1)
  })

  it('bounds a cleanup that hangs by its grace', async () => {
    const onCleanupError = vi.fn()
    const started = performance.now()
    await expect(
      withDeadline(() => new Promise(() => {}), {
        timeoutMs: 10,
        operation: 'op',
        onTimeout: timeoutError,
        cleanup: () => new Promise(() => {}),
        cleanupGraceMs: 40,
        onCleanupError,
      }),
    ).rejects.toBeInstanceOf(SandboxCreateTimeoutError)
    expect(performance.now() - started).toBeLessThan(2000)
    expect(String(onCleanupError.mock.calls[0]?.[0])).toContain('40 ms')
  })

  it('sleep rejects on abort', async () => {
    const controller = new AbortController()
    const pending = sleep(10_000, controller.signal)
    controller.abort()
    await expect(pending).rejects.toBeInstanceOf(SandboxAbortedError)
  })
})
