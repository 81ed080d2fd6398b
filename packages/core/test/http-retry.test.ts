import fc from 'fast-check'
import { describe, expect, it } from 'vitest'
import { isTransientStatus, parseRetryAfter, retryDelayMs } from '../src/backend-kit.js'

describe('Retry-After', () => {
  it('reads delay-seconds and HTTP dates, capped at a minute, never negative', () => {
    const now = Date.parse('2025-01-01T00:00:00Z')
    expect(parseRetryAfter('0', now)).toBe(0)
    expect(parseRetryAfter(' 7 ', now)).toBe(7_000)
    expect(parseRetryAfter('Wed, 01 Jan 2025 00:00:03 GMT', now)).toBe(3_000)
    expect(parseRetryAfter('Tue, 31 Dec 2024 23:00:00 GMT', now)).toBe(0)
    expect(parseRetryAfter('86400', now)).toBe(60_000)
    expect(parseRetryAfter(undefined, now)).toBeUndefined()
    expect(parseRetryAfter('soon', now)).toBeUndefined()
  })

  it('never yields a wait outside [0, 60 s] for any header text', () => {
    fc.assert(
      fc.property(fc.string(), (text) => {
        const ms = parseRetryAfter(text, 0)
        return ms === undefined || (ms >= 0 && ms <= 60_000)
      }),
    )
  })

  it('backs off exponentially with jitter when the server gives no hint, and follows the hint when it does', () => {
    fc.assert(
      fc.property(
        fc.integer({ min: 1, max: 30 }),
        fc.double({ min: 0, max: 0.999_999, noNaN: true }),
        (attempt, random) => {
          const ceiling = Math.min(8_000, 500 * 2 ** (attempt - 1))
          const ms = retryDelayMs(attempt, undefined, () => random)
          return ms >= ceiling / 2 && ms <= ceiling
        },
      ),
    )
    expect(retryDelayMs(5, '2')).toBe(2_000)
  })
})

describe('transient statuses', () => {
  it('retries throttling, timeouts and the passing server errors, nothing else', () => {
    for (const status of [408, 429, 500, 502, 503, 504])
      expect(isTransientStatus(status)).toBe(true)
    for (const status of [200, 202, 400, 401, 403, 404, 409, 422, 501]) {
      expect(isTransientStatus(status)).toBe(false)
    }
  })
})
