import { SandboxError } from '@cordon/core'
import { BUSYBOX_IMAGE } from '@cordon/test-support'
import { describe, expect, it } from 'vitest'
import { createDockerSandboxProvider } from '../src/index.js'
import { privateEngineForSuite } from './private-engine.js'

/**
 * The engine restarting underneath cordon (an upgrade, a crash): work in
 * flight ends with a typed error within a bound, never a hang, and the same
 * provider works again once the engine is back. On an engine of the test's
 * own, so the engine every other test uses is never restarted.
 */
describe('an engine restart', () => {
  const engine = privateEngineForSuite()

  const provider = () =>
    createDockerSandboxProvider({
      backend: { tier: 'container', image: BUSYBOX_IMAGE, socketPath: engine.socketPath },
      layout: { outputs: { source: { type: 'ephemeral' } } },
    })

  it('during an exec: a typed error within seconds, then the provider works again', async () => {
    const hosted = provider()
    try {
      const sandbox = await hosted.create()
      expect((await sandbox.exec('echo', ['up'])).stdout).toBe('up\n')
      // When the call settled, not when the harness finished reaping the engine's processes.
      let settledAt = 0
      const running = sandbox.exec('sleep', ['120']).then(
        (result) => result,
        (error: unknown) => error,
      )
      void running.then(() => {
        settledAt = Date.now()
      })
      await new Promise((resolve) => setTimeout(resolve, 300))
      const stopped = Date.now()
      await engine.stop('SIGKILL')
      const outcome = await running
      const waited = settledAt - stopped
      expect(SandboxError.isInstance(outcome), String(outcome)).toBe(true)
      expect(waited).toBeLessThan(5_000)
      // The sandbox is gone with its engine, and says so.
      for (let polled = 0; sandbox.endReason === undefined && polled < 100; polled++)
        await new Promise((resolve) => setTimeout(resolve, 50))
      expect(sandbox.endReason).toBe('lost')

      // While the engine is down: refused with a typed error, quickly.
      const down = Date.now()
      const refused = await hosted.create().catch((error: unknown) => error)
      expect(SandboxError.isInstance(refused), String(refused)).toBe(true)
      expect(Date.now() - down).toBeLessThan(5_000)

      await engine.start()
      const again = await hosted.create()
      expect((await again.exec('echo', ['back'])).stdout).toBe('back\n')
      await again.destroy()
    } finally {
      await hosted.close()
    }
  }, 120_000)

  it('during a create: a typed error within seconds, nothing left, then creates work', async () => {
    const hosted = provider()
    try {
      // A warm-up create fills the runtime volume, so the next one is mid-way quickly.
      await (await hosted.create()).destroy()
      let settledAt = 0
      const creating = hosted.create().then(
        (sandbox) => sandbox,
        (error: unknown) => error,
      )
      void creating.then(() => {
        settledAt = Date.now()
      })
      await new Promise((resolve) => setTimeout(resolve, 40))
      const stopped = Date.now()
      await engine.stop('SIGKILL')
      const outcome = await creating
      // A create takes hundreds of milliseconds: 40 ms in, it is cut off mid-way.
      expect(SandboxError.isInstance(outcome), String(outcome)).toBe(true)
      expect(settledAt - stopped).toBeLessThan(10_000)
      await engine.start()
      const after = await hosted.create()
      expect((await after.exec('echo', ['ok'])).stdout).toBe('ok\n')
      await after.destroy()
      // What the cut-off create made is removed (its late sweeps run within 8 s).
      let left: string[] = []
      for (let polled = 0; polled < 60; polled++) {
        left = (
          await engine.docker.listContainers({
            all: true,
            filters: { label: [`cordon.provider=${hosted.instanceId}`] },
          })
        ).map((info) => `${info.Names[0]} ${info.State}`)
        if (left.length === 0) break
        await new Promise((resolve) => setTimeout(resolve, 250))
      }
      expect(left).toEqual([])
    } finally {
      await hosted.close()
    }
  }, 120_000)
})
