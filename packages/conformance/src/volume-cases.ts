import { randomBytes } from 'node:crypto'
import {
  SandboxConfigValidationError,
  SandboxControlRefusedError,
  SandboxVolumeError,
} from '@cordon/core'
import { describe, expect, it } from 'vitest'
import type { SandboxesUnderTest } from './shared-sandbox.js'
import type { SandboxConformanceOptions } from './suite-options.js'

/**
 * Named persistent volumes: proved where declared, checked as a refusal
 * where not.
 *
 * The suite's providers come from `options.createProvider()`, whose layout
 * the backend's test fixes, so the suite cannot make a provider whose layout
 * mounts the volume it creates here. It proves what every declaring backend
 * must do through `provider.volumes` (create, list, the typed errors,
 * remove); mounting one by a layout (a sandbox writes, is destroyed, and a
 * sandbox of another uid reads and writes it; the size cap; one writer or
 * many readers) is proved by each backend's own tests against its engine
 * (backend-docker's test/volumes.test.ts, under runc and gVisor).
 */
export function volumeCases(options: SandboxConformanceOptions, sandboxes: SandboxesUnderTest) {
  const timeout = options.timeoutMs ?? 60_000

  describe('volumes', () => {
    it(
      'volumes: declared, a named volume is created, listed, refused twice and removed; not declared, every member is refused naming the control',
      async () => {
        const { provider } = sandboxes
        const name = `conformance-${randomBytes(6).toString('hex')}`
        if (!sandboxes.declared.volumes) {
          for (const call of [
            () => provider.volumes.create({ name, sizeMb: 8 }),
            () => provider.volumes.list(),
            () => provider.volumes.remove(name),
          ]) {
            const refused = await call().catch((error: unknown) => error)
            expect(SandboxControlRefusedError.isInstance(refused), String(refused)).toBe(true)
            expect((refused as SandboxControlRefusedError).control).toBe('volumes')
            expect((refused as SandboxControlRefusedError).backend).toBe(provider.backend)
          }
          return
        }
        const before = Date.now()
        const created = await provider.volumes.create({ name, sizeMb: 8 })
        try {
          expect(created).toMatchObject({ name, sizeMb: 8, usedBy: [] })
          expect(created.createdAt).toBeGreaterThanOrEqual(before - 60_000)
          const listed = (await provider.volumes.list()).find((volume) => volume.name === name)
          expect(listed).toMatchObject({ name, sizeMb: 8, usedBy: [] })
          const twice = await provider.volumes
            .create({ name, sizeMb: 8 })
            .catch((error: unknown) => error)
          expect(SandboxVolumeError.isInstance(twice), String(twice)).toBe(true)
          expect((twice as SandboxVolumeError).reason).toBe('exists')
          const badName = await provider.volumes
            .create({ name: '../escape', sizeMb: 8 })
            .catch((error: unknown) => error)
          expect(SandboxConfigValidationError.isInstance(badName)).toBe(true)
        } finally {
          await provider.volumes.remove(name)
        }
        expect((await provider.volumes.list()).map((volume) => volume.name)).not.toContain(name)
        const gone = await provider.volumes.remove(name).catch((error: unknown) => error)
        expect(SandboxVolumeError.isInstance(gone), String(gone)).toBe(true)
        expect((gone as SandboxVolumeError).reason).toBe('not-found')
      },
      timeout,
    )
  })
}
