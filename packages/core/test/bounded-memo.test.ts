import { describe, expect, it } from 'vitest'
import { boundedMemo } from '../src/bounded-memo.js'

describe('boundedMemo', () => {
  it('computes an input once, undefined answers included, and freezes object answers', () => {
    const calls: string[] = []
    const parse = boundedMemo(
      (input: string) => {
        calls.push(input)
        return input === 'bad' ? undefined : { input }
      },
      { maxEntries: 8, maxInputLength: 16 },
    )
    const first = parse('a')
    expect(parse('a')).toBe(first)
    expect(Object.isFrozen(first)).toBe(true)
    expect(parse('bad')).toBeUndefined()
    expect(parse('bad')).toBeUndefined()
    expect(calls).toEqual(['a', 'bad'])
  })

  it('never holds more than its bound, and never keeps a long input', () => {
    let computed = 0
    const double = boundedMemo(
      (input: string) => {
        computed += 1
        return input.length * 2
      },
      { maxEntries: 4, maxInputLength: 8 },
    )
    for (let index = 0; index < 100; index += 1)
      expect(double(`k${index}`)).toBe(`k${index}`.length * 2)
    expect(computed).toBe(100)
    // Emptied when full: the last few inputs are still known, the first is not.
    double('k99')
    expect(computed).toBe(100)
    double('k0')
    expect(computed).toBe(101)
    const long = 'x'.repeat(9)
    double(long)
    double(long)
    expect(computed).toBe(103)
  })
})
