import type { SandboxTier } from '@cordon/builtin-backends'
import { describe, expect, expectTypeOf, it } from 'vitest'
import type { createBackend } from '../src/index.js'

/** What a host of the reference writes; `pnpm typecheck` compiles it. */
function referenceHostTier(backend: ReturnType<typeof createBackend>): SandboxTier {
  const tier: SandboxTier = backend.tier
  return tier
}

describe("the backend's tier, as the reference types it", () => {
  it("is the literal 'container', a SandboxTier a host assigns without a cast", () => {
    expectTypeOf<ReturnType<typeof createBackend>['tier']>().toEqualTypeOf<'container'>()
    expect(referenceHostTier({ tier: 'container' } as ReturnType<typeof createBackend>)).toBe(
      'container',
    )
  })
})
