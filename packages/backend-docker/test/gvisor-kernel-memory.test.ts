import type { CordonSandboxProvider } from '@cordon/core'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import {
  AGENT_MEMORY_ALLOWANCE_MB,
  GVISOR_KERNEL_MEMORY_ALLOWANCE_MB,
  MIN_MEMORY_LIMIT_MB,
} from '../src/container-spec.js'
import { type MemoryCgroup, memoryCgroupOf } from './memory-cgroup.js'
import { docker, testProvider } from './test-run.js'

const MiB = 1024 * 1024

/** The host's memory cgroup of a sandbox's container. */
async function sandboxMemoryCgroup(sandboxId: string): Promise<MemoryCgroup> {
  const info = await docker.getContainer(`cordon-${sandboxId}`).inspect()
  return memoryCgroupOf(info.State.Pid)
}

// Under gVisor the sandbox's kernel is a process in the container's cgroup,
// and this runsc keeps a `/proc/<pid>` entry for processes long gone: a sandbox
// that has run a few thousand commands holds well over 100 MB of kernel memory
// its commands never asked for. memoryLimitMb is what the commands get, so
// the kernel's share must not come out of it.
describe('gVisor kernel memory (runsc)', () => {
  let provider: CordonSandboxProvider
  beforeAll(() => {
    provider = testProvider({ runtime: 'runsc', cpus: 1 })
  })
  afterAll(async () => {
    await provider.close()
  })

  it('a sandbox at the smallest limit runs 3,000 commands and its commands still get their memoryLimitMb', async () => {
    const sandbox = await provider.create({ memoryLimitMb: MIN_MEMORY_LIMIT_MB })
    try {
      const churn = await sandbox.exec(
        'sh',
        ['-c', 'i=0; while [ $i -lt 3000 ]; do /bin/true; i=$((i+1)); done; echo ran $i'],
        { timeout: 400_000 },
      )
      expect(churn.stdout).toBe('ran 3000\n')
      // The kernel really took more than the agent's allowance: without its
      // own, this sandbox would have been ended during the loop.
      const peak = (await sandboxMemoryCgroup(sandbox.id)).peak()
      expect(peak).toBeGreaterThan((MIN_MEMORY_LIMIT_MB + AGENT_MEMORY_ALLOWANCE_MB) * MiB)
      // And the commands still get what they were promised: one buffer of
      // all but 8 MiB of memoryLimitMb (busybox's dd fills a block of bs
      // bytes before it writes it), while the kernel keeps what it holds.
      const fill = await sandbox.exec('dd', [
        'if=/dev/zero',
        'of=/dev/null',
        `bs=${MIN_MEMORY_LIMIT_MB - 8}M`,
        'count=2',
      ])
      expect(fill.exitCode).toBe(0)
      expect(fill.oomKilled).toBeFalsy()
      expect((await sandbox.exec('echo', ['alive'])).stdout).toBe('alive\n')
      expect(sandbox.endReason).toBeUndefined()
      const limit = (await sandboxMemoryCgroup(sandbox.id)).limit()
      expect(limit).toBe(
        (MIN_MEMORY_LIMIT_MB + AGENT_MEMORY_ALLOWANCE_MB + GVISOR_KERNEL_MEMORY_ALLOWANCE_MB) * MiB,
      )
    } finally {
      await sandbox.destroy()
    }
  }, 480_000)
})
