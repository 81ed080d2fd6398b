import { SANDBOX_MAX_OUTPUT_BYTES } from '@cordon/core'
import { truncateOutput } from '@openai/agents-core/sandbox/internal'
import { describe, expect, it } from 'vitest'
import { BoundedOutput } from '../src/bounded-output.js'

describe('BoundedOutput', () => {
  it('holds a bounded head and tail however much is pushed, and counts all of it', () => {
    const output = new BoundedOutput(400)
    const chunk = 'a'.repeat(64 * 1024)
    let peak = 0
    for (let i = 0; i < 1000; i++) {
      output.push(chunk)
      peak = Math.max(peak, output.retainedCharacters)
    }
    output.push('END')
    // Four bytes a token, a head and a tail, plus one chunk before compaction.
    expect(peak).toBeLessThanOrEqual(3 * 400 + chunk.length)
    expect(output.truncated).toBe(true)
    expect(output.originalTokenCount).toBe(Math.ceil((1000 * chunk.length + 3) / 4))
    const text = output.text()
    expect(text.startsWith('[...')).toBe(true)
    expect(text.endsWith('END')).toBe(true)
    // The SDK keeps the notice in front of its own marker, within its budget.
    const seen = truncateOutput(text, 100).text
    expect(seen).toMatch(/characters truncated from process output/)
    expect(seen.endsWith('END')).toBe(true)
    expect(Buffer.byteLength(seen)).toBeLessThanOrEqual(
      400 + '[...65535972 characters truncated from process output...]\n'.length,
    )
  })

  it('keeps short output whole and without a notice', () => {
    const output = new BoundedOutput()
    output.push('one\n')
    output.push('two\n')
    expect(output.truncated).toBe(false)
    expect(output.text()).toBe('one\ntwo\n')
  })

  it('keeps at most cordon’s output cap', () => {
    const output = new BoundedOutput()
    const chunk = 'b'.repeat(1024 * 1024)
    for (let i = 0; i < 30; i++) output.push(chunk)
    expect(output.truncated).toBe(true)
    expect(output.text().length).toBeLessThanOrEqual(SANDBOX_MAX_OUTPUT_BYTES + 100)
  })

  it('keeps output up to the cap whole, so the SDK formats it as its own clients do', () => {
    const output = new BoundedOutput()
    const lines = Array.from({ length: 2001 }, (_, n) => `line-${n}-${'x'.repeat(10)}\n`)
    for (const line of lines) output.push(line)
    expect(output.truncated).toBe(false)
    for (const budget of [20, 50, 200])
      expect(truncateOutput(output.text(), budget)).toEqual(truncateOutput(lines.join(''), budget))
  })

  it('does not split a character made of a surrogate pair', () => {
    const output = new BoundedOutput(4)
    output.push(`${'x'.repeat(3)}😀${'y'.repeat(20)}😀zz`)
    expect(output.text()).not.toMatch(/[\ud800-\udbff](?![\udc00-\udfff])/)
    expect(output.text()).not.toMatch(/(?<![\ud800-\udbff])[\udc00-\udfff]/)
  })
})
