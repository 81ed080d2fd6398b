import { describe, expect, it } from 'vitest'
import { newSandboxId, SANDBOX_ID_PATTERN } from '../src/backend-kit.js'
import { isSandboxId } from '../src/index.js'

describe('sandbox ids', () => {
  it('are sbx_ plus 26 base-32 characters and do not repeat', () => {
    const ids = new Set<string>()
    for (let i = 0; i < 2000; i++) {
      const id = newSandboxId()
      expect(id).toMatch(SANDBOX_ID_PATTERN)
      ids.add(id)
    }
    expect(ids.size).toBe(2000)
  })

  it('isSandboxId accepts only the format', () => {
    expect(isSandboxId(newSandboxId())).toBe(true)
    expect(isSandboxId('sbx_123')).toBe(false)
    expect(isSandboxId(42)).toBe(false)
  })
})
