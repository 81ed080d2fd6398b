import { describe, expect, it } from 'vitest'
import { TunnelReadBuffers } from '../src/tunnel-read-buffers.js'

describe('TunnelReadBuffers', () => {
  it('hands a given-back buffer to the next tunnel, and a fresh one when none is kept', () => {
    const buffers = new TunnelReadBuffers(1024, 2)
    const first = buffers.take()
    const second = buffers.take()
    expect(first).not.toBe(second)
    expect(first.length).toBe(1024)
    buffers.giveBack(first)
    expect(buffers.take()).toBe(first)
    expect(buffers.take()).not.toBe(first)
  })

  it('keeps at most its bound, and nothing of another size', () => {
    const buffers = new TunnelReadBuffers(1024, 2)
    const taken = [buffers.take(), buffers.take(), buffers.take()]
    for (const buffer of taken) buffers.giveBack(buffer)
    buffers.giveBack(Buffer.alloc(10))
    const again = new Set([buffers.take(), buffers.take(), buffers.take()])
    expect([...again].filter((buffer) => taken.includes(buffer))).toHaveLength(2)
    for (const buffer of again) expect(buffer.length).toBe(1024)
  })
})
