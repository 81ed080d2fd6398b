import {
  type CordonSandbox,
  SandboxControlRefusedError,
  type SandboxCreateConfig,
} from '@cordon/core'
import { expect } from 'vitest'
import type { SandboxesUnderTest } from './shared-sandbox.js'

/**
 * What `create(config)` settles to: the refusal, or, when the provider
 * accepted the control, the fact (the sandbox is destroyed at once, so a
 * dishonest backend leaks nothing).
 */
export async function createOutcome(
  sandboxes: SandboxesUnderTest,
  config: SandboxCreateConfig,
): Promise<unknown> {
  return sandboxes.provider.create(config).then(
    async (sandbox: CordonSandbox) => {
      await sandbox.destroy()
      return new Error(`create(${describeConfig(config)}) was accepted`)
    },
    (error: unknown) => error,
  )
}

function describeConfig(config: SandboxCreateConfig): string {
  return JSON.stringify(config, (_key, value) =>
    typeof value === 'function' ? '[function]' : value,
  )
}

/**
 * Expects `create(config)` to be refused with `SandboxControlRefusedError`
 * naming `control` and the provider's backend: the half of a "proved where
 * declared, refused where not" case that a declared `false` asks for.
 */
export async function expectRefused(
  sandboxes: SandboxesUnderTest,
  config: SandboxCreateConfig,
  control: string,
): Promise<void> {
  const error = await createOutcome(sandboxes, config)
  expect(
    SandboxControlRefusedError.isInstance(error),
    `${control} is refused with SandboxControlRefusedError, got ${String(error)}`,
  ).toBe(true)
  expect(error).toMatchObject({ control, backend: sandboxes.provider.backend })
}
