import { describe, expect, it } from 'vitest'
import { ExecOutputCollector, utf8BoundaryAtOrBefore } from '../src/exec-output.js'
import type { SandboxOutputChunk } from '../src/index.js'

const bytes = (text: string) => new TextEncoder().encode(text)

describe('ExecOutputCollector', () => {
  it('never splits a multi-byte character across streamed chunks', () => {
    const seen: SandboxOutputChunk[] = []
    const collector = new ExecOutputCollector({ onOutput: (chunk) => seen.push(chunk) })
    const all = bytes('héllo wörld 🎉 done')
    for (let i = 0; i < all.length; i++) collector.push('stdout', all.subarray(i, i + 1))
    const result = collector.finish()
    expect(result.stdout).toBe('héllo wörld 🎉 done')
    expect(seen.map((chunk) => chunk.data).join('')).toBe('héllo wörld 🎉 done')
    expect(seen.every((chunk) => !chunk.data.includes('\uFFFD'))).toBe(true)
  })

  it('keeps streams apart and caps each at maxOutputBytes on a character boundary', () => {
    const collector = new ExecOutputCollector({ maxOutputBytes: 5 })
    collector.push('stdout', bytes('abcd€xyz'))
    collector.push('stderr', bytes('12'))
    const result = collector.finish()
    expect(result.stdout).toBe('abcd')
    expect(result.stdoutTruncated).toBe(true)
    expect(result.stderr).toBe('12')
    expect(result.stderrTruncated).toBe(false)
  })

  it('still streams everything past the cap', () => {
    const seen: string[] = []
    const collector = new ExecOutputCollector({
      maxOutputBytes: 2,
      onOutput: (chunk) => seen.push(chunk.data),
    })
    collector.push('stdout', bytes('hello'))
    collector.push('stdout', bytes(' world'))
    expect(collector.finish().stdout).toBe('he')
    expect(seen.join('')).toBe('hello world')
  })

  it('survives a listener that throws', () => {
    const collector = new ExecOutputCollector({
      onOutput: () => {
        throw new Error('listener bug')
      },
    })
    collector.push('stdout', bytes('ok'))
    expect(collector.finish().stdout).toBe('ok')
  })

  it('finds UTF-8 boundaries', () => {
    const euro = bytes('a€') // 61 e2 82 ac
    expect(utf8BoundaryAtOrBefore(euro, 4)).toBe(4)
    expect(utf8BoundaryAtOrBefore(euro, 3)).toBe(1)
    expect(utf8BoundaryAtOrBefore(euro, 2)).toBe(1)
    expect(utf8BoundaryAtOrBefore(euro, 1)).toBe(1)
  })
})
