import type { CordonSandboxProvider } from '@cordon/core'
import { endReasonOf } from '@cordon/test-support'
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest'
import { EngineEvents } from '../src/engine-events.js'
import { docker, testProvider } from './test-run.js'

/**
 * The engine does not always report an out-of-memory kill: under load it
 * sometimes sends a gVisor sandbox's `die` (exit 137) and never its `oom`
 * (end-reason.ts). A SIGKILL the engine was not asked to send is then taken
 * for one. Here the engine's `oom` reports are silenced for every sandbox
 * of this file (its own worker, so no other test's sandboxes), as the
 * engine does for some.
 */
describe('a SIGKILL the engine was not asked for, with no oom event', () => {
  const memoryBomb = ['-c', 'a=x; while :; do a="$a$a"; done']
  let silenced: ReturnType<typeof vi.spyOn>
  let provider: CordonSandboxProvider
  beforeAll(() => {
    silenced = vi.spyOn(EngineEvents.prototype, 'oomSince').mockResolvedValue(false)
    provider = testProvider({ runtime: 'runsc' })
  })
  afterAll(async () => {
    await provider.close()
    silenced.mockRestore()
  })

  it('a gVisor sandbox killed for memory ends out-of-memory, and its command oomKilled', async () => {
    const sandbox = await provider.create({ memoryLimitMb: 64 })
    const result = await sandbox
      .exec('sh', memoryBomb, { timeout: 30_000 })
      .catch((error: unknown) => error)
    expect(await endReasonOf(sandbox)).toBe('out-of-memory')
    expect(result).toMatchObject({ exitCode: 137, oomKilled: true })
    expect(silenced).toHaveBeenCalled()
  })

  it('a sandbox killed with SIGKILL through the engine ends lost', async () => {
    const sandbox = await provider.create({ memoryLimitMb: 64 })
    const running = sandbox
      .exec('sleep', ['30'], { timeout: 30_000 })
      .catch((error: unknown) => error)
    await docker.getContainer(`cordon-${sandbox.id}`).kill()
    expect(await endReasonOf(sandbox)).toBe('lost')
    expect(await running).not.toMatchObject({ oomKilled: true })
  })

  it("a person's kill -9 of the sandbox's first process on the host is reported as out-of-memory too", async () => {
    const sandbox = await provider.create()
    const pid = (await docker.getContainer(`cordon-${sandbox.id}`).inspect()).State.Pid
    expect(pid).toBeGreaterThan(0)
    process.kill(pid, 'SIGKILL')
    expect(await endReasonOf(sandbox)).toBe('out-of-memory')
  })
})
