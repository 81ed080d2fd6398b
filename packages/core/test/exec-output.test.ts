import { describe, expect, it } from 'vitest'
import { ExecOutputCollector, utf8BoundaryAtOrBefore } from '../src/exec-output.js'
import type { SandboxOutputBytes, SandboxOutputChunk } from '../src/index.js'

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

  it('hands onOutputBytes the bytes as they came, invalid UTF-8 and all, beside the decoded text', () => {
    const seen: SandboxOutputBytes[] = []
    const text: string[] = []
    const collector = new ExecOutputCollector({
      onOutputBytes: (chunk) => {
        seen.push(chunk)
      },
      onOutput: (chunk) => text.push(chunk.data),
    })
    const binary = Uint8Array.of(0xff, 0xfe, 0x00, 0x01)
    expect(collector.push('stdout', binary)).toBeUndefined()
    collector.push('stderr', Uint8Array.of(0xe2, 0x82))
    collector.push('stderr', Uint8Array.of(0xac))
    collector.finish()
    expect(seen.map((chunk) => [chunk.stream, [...chunk.bytes]])).toEqual([
      ['stdout', [0xff, 0xfe, 0x00, 0x01]],
      ['stderr', [0xe2, 0x82]],
      ['stderr', [0xac]],
    ])
    expect(text.join('')).toBe('\uFFFD\uFFFD\u0000\u0001€')
  })

  it("returns onOutputBytes' hold as a promise that settles when it does, however it does", async () => {
    let release: () => void = () => {}
    let refuse: (error: Error) => void = () => {}
    const holds = [
      new Promise<void>((resolve) => {
        release = resolve
      }),
      new Promise<void>((_resolve, reject) => {
        refuse = reject
      }),
    ]
    let next = 0
    const collector = new ExecOutputCollector({ onOutputBytes: () => holds[next++] })
    const first = collector.push('stdout', bytes('a'))
    const second = collector.push('stdout', bytes('b'))
    expect(first).toBeInstanceOf(Promise)
    let firstSettled = false
    void first!.then(() => {
      firstSettled = true
    })
    await new Promise((resolve) => setTimeout(resolve, 10))
    expect(firstSettled).toBe(false)
    release()
    await first
    refuse(new Error('the consumer failed'))
    await expect(second).resolves.toBeUndefined()
    // A listener that throws, or returns anything but a thenable, holds nothing.
    const throwing = new ExecOutputCollector({
      onOutputBytes: () => {
        throw new Error('listener bug')
      },
    })
    expect(throwing.push('stdout', bytes('x'))).toBeUndefined()
    expect(throwing.finish().stdout).toBe('x')
    const counting = new ExecOutputCollector({ onOutputBytes: () => 42 })
    expect(counting.push('stdout', bytes('y'))).toBeUndefined()
  })

  it('finds UTF-8 boundaries', () => {
    const euro = bytes('a€') // 61 e2 82 ac
    expect(utf8BoundaryAtOrBefore(euro, 4)).toBe(4)
    expect(utf8BoundaryAtOrBefore(euro, 3)).toBe(1)
    expect(utf8BoundaryAtOrBefore(euro, 2)).toBe(1)
    expect(utf8BoundaryAtOrBefore(euro, 1)).toBe(1)
  })
})
