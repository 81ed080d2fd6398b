import { chmod, mkdtemp, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { SandboxControlRefusedError } from '@cordon/core'
import { describe, expect, it } from 'vitest'
import {
  AGENT_MEMORY_ALLOWANCE_MB,
  GVISOR_KERNEL_MEMORY_ALLOWANCE_MB,
  MIN_MEMORY_LIMIT_MB,
} from '../src/container-spec.js'
import { describeAlongside } from './run-alongside.js'
import { docker, testProvider } from './test-run.js'

const MiB = 1024 * 1024

for (const runtime of ['docker', 'runsc'] as const) {
  describeAlongside(`the smallest memory limit (${runtime})`, () => {
    it('refuses one below the minimum, naming memoryLimitMb, the minimum and the allowance', async () => {
      const provider = testProvider({ runtime })
      try {
        const error = await provider
          .create({ memoryLimitMb: MIN_MEMORY_LIMIT_MB - 1 })
          .catch((caught: unknown) => caught)
        expect(SandboxControlRefusedError.isInstance(error)).toBe(true)
        expect(error).toMatchObject({ control: 'memoryLimitMb' })
        expect((error as Error).message).toBe(
          `Backend "container:${runtime}" cannot enforce "memoryLimitMb": 31 MiB is below the minimum of 32 MiB; the sandbox's memory limit is memoryLimitMb plus 48 MiB for cordon's agent${runtime === 'runsc' ? " and 160 MiB for gVisor's kernel" : ''}`,
        )
      } finally {
        await provider.close()
      }
      // A provider default below it is refused the same way.
      const small = testProvider({ runtime }, { defaultMemoryLimitMb: 1 })
      try {
        const error = await small.create().catch((caught: unknown) => caught)
        expect(error).toMatchObject({ code: 'CONTROL_REFUSED', control: 'memoryLimitMb' })
      } finally {
        await small.close()
      }
    })

    it('at the minimum, streams 100 MiB through a host directory and back, and runs a command and a terminal', async () => {
      const hostDir = await mkdtemp(join(tmpdir(), 'cordon-memory-floor-'))
      await chmod(hostDir, 0o1777)
      const provider = testProvider(
        { runtime },
        { layout: { outputs: { source: { type: 'hostDir', hostPath: hostDir } } } },
      )
      try {
        const sandbox = await provider.create({ memoryLimitMb: MIN_MEMORY_LIMIT_MB })
        const info = await docker.getContainer(`cordon-${sandbox.id}`).inspect()
        expect(info.HostConfig.Memory).toBe(
          (MIN_MEMORY_LIMIT_MB +
            AGENT_MEMORY_ALLOWANCE_MB +
            (runtime === 'runsc' ? GVISOR_KERNEL_MEMORY_ALLOWANCE_MB : 0)) *
            MiB,
        )
        const chunk = new Uint8Array(MiB).fill(7)
        await sandbox.writeFileStream(
          'big.bin',
          (async function* () {
            for (let sent = 0; sent < 100; sent++) yield chunk
          })(),
        )
        let received = 0
        for await (const part of await sandbox.readFileStream('big.bin')) received += part.length
        expect(received).toBe(100 * MiB)
        expect((await sandbox.exec('wc', ['-c', 'big.bin'])).stdout.trim()).toBe(
          `${100 * MiB} big.bin`,
        )
        const terminal = await sandbox.openTerminal({
          command: 'sh',
          args: ['-c', 'exit 3'],
          size: { cols: 80, rows: 24 },
        })
        expect(await terminal.exited).toBe(3)
        expect(sandbox.endReason).toBeUndefined()
      } finally {
        await provider.close()
        await rm(hostDir, { recursive: true, force: true })
      }
    }, 180_000)
  })
}
