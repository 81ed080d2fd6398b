import type { CordonSandboxProvider, SandboxEvent } from '@cordon/core'
import { endReasonOf } from '@cordon/test-support'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { describeAlongside } from './run-alongside.js'
import { docker, testProvider } from './test-run.js'

for (const runtime of ['docker', 'runsc'] as const) {
  describeAlongside(`lifetime that follows work, end reasons and usage (${runtime})`, () => {
    let provider: CordonSandboxProvider
    const events: SandboxEvent[] = []
    beforeAll(() => {
      provider = testProvider({ runtime, cpus: 1 }, { onEvent: (event) => events.push(event) })
    })
    afterAll(async () => {
      await provider.close()
    })

    it('the idle reaper spares a long silent command and reaps an idle sandbox on time', async () => {
      const idleTimeoutMs = 1_500
      const [working, idle] = await Promise.all([
        provider.create({ idleTimeoutMs }),
        provider.create({ idleTimeoutMs }),
      ])
      const idleSince = Date.now()
      // Silent for twice the idle timeout.
      const result = await working.exec('sleep', ['3'])
      expect(result.exitCode).toBe(0)
      expect(working.endReason).toBeUndefined()
      expect(await endReasonOf(idle)).toBe('idle')
      const idleFor = Date.now() - idleSince
      expect(idleFor).toBeGreaterThanOrEqual(idleTimeoutMs)
      // Gone from the engine too.
      await expect(docker.getContainer(`cordon-${idle.id}`).inspect()).rejects.toThrow()
      expect(await endReasonOf(working)).toBe('idle')
      expect(
        events.some(
          (event) =>
            event.type === 'lifecycle' &&
            event.phase === 'destroy.end' &&
            event.sandboxId === idle.id &&
            event.endReason === 'idle',
        ),
      ).toBe(true)
    })

    it('a started process and keepAlive hold off the idle reaper', async () => {
      const sandbox = await provider.create({ idleTimeoutMs: 1_000 })
      const process = await sandbox.start('sleep', ['2.5'])
      await process.wait()
      expect(sandbox.endReason).toBeUndefined()
      sandbox.keepAlive(2_000)
      await new Promise((resolve) => setTimeout(resolve, 2_200))
      expect(sandbox.endReason).toBeUndefined()
      expect(await endReasonOf(sandbox)).toBe('idle')
    })

    it('records lifetime, destroyed and lost as the end reason', async () => {
      // Long enough that a gVisor create on a loaded machine (over 1.5 s seen in
      // CI) finishes inside it: the agent's lifetime counts from its own start.
      const expiring = await provider.create({ lifetimeMs: 5_000 })
      const destroyed = await provider.create()
      const lost = await provider.create()
      await destroyed.destroy()
      expect(destroyed.endReason).toBe('destroyed')
      // Killed behind cordon's back: the engine or an operator removed it.
      await docker.getContainer(`cordon-${lost.id}`).kill()
      expect(await endReasonOf(lost)).toBe('lost')
      expect(await endReasonOf(expiring)).toBe('lifetime')
    })

    if (runtime === 'docker') {
      it('reports a command killed for memory as an oom event, and the sandbox goes on', async () => {
        const sandbox = await provider.create({ memoryLimitMb: 64 })
        const result = await sandbox.exec('sh', ['-c', 'a=x; while :; do a="$a$a"; done'], {
          timeout: 30_000,
        })
        expect(result.oomKilled).toBe(true)
        expect(
          events.some(
            (event) =>
              event.type === 'lifecycle' && event.phase === 'oom' && event.sandboxId === sandbox.id,
          ),
        ).toBe(true)
        expect((await sandbox.exec('echo', ['alive'])).stdout).toBe('alive\n')
        await sandbox.destroy()
      })
    }

    if (runtime === 'runsc') {
      it('records out-of-memory when the whole sandbox is killed for memory', async () => {
        const sandbox = await provider.create({ memoryLimitMb: 64 })
        const result = await sandbox
          .exec('sh', ['-c', 'a=x; while :; do a="$a$a"; done'], { timeout: 30_000 })
          .catch((error: unknown) => error)
        expect(result).toBeDefined()
        expect(await endReasonOf(sandbox)).toBe('out-of-memory')
      })
    }

    it('reports usage measured from the engine and the agent, and nproc matches the CPU limit', async () => {
      const sandbox = await provider.create()
      await sandbox.exec('dd', ['if=/dev/zero', 'of=big', 'bs=1024', 'count=1024'])
      await sandbox.writeFile('small.txt', 'x'.repeat(1000))
      const sleeper = await sandbox.start('sleep', ['30'])
      // Some CPU time to count.
      await sandbox.exec('sh', ['-c', 'i=0; while [ $i -lt 20000 ]; do i=$((i+1)); done'])
      const usage = await sandbox.stats()
      // The disk both take: their sizes in whole blocks (4 KiB blocks under
      // runc; gVisor reports blocks of 512 bytes).
      expect(usage.diskBytes).toBeGreaterThanOrEqual(1024 * 1024 + 1000)
      expect(usage.diskBytes).toBeLessThanOrEqual(1024 * 1024 + 4096)
      expect(usage.processes).toBeGreaterThanOrEqual(1)
      expect(usage.cpuTimeMs).toBeGreaterThan(10)
      expect(usage.memoryBytes).toBeGreaterThan(0)
      expect(usage.memoryPeakBytes).toBeGreaterThanOrEqual(usage.memoryBytes!)
      expect(usage).toMatchObject({ egressBytesOut: 0, egressBytesIn: 0 })
      await sleeper.kill('SIGKILL')
      // One CPU allowed, one CPU seen (the engine machine has more). gVisor
      // reports its quota rounded up but never fewer than 2 (its floor), and
      // is never pinned to cores (see the next test).
      const cores = await sandbox.exec('nproc')
      expect(cores.stdout.trim()).toBe(runtime === 'runsc' ? '2' : '1')
      await sandbox.destroy()
    })

    it('a loop of short commands runs for 10 s and the sandbox lives on, its host pids far below the engine limit', async () => {
      // Under gVisor pinned to one core, this loop grew the container past
      // 1,100 host pids in 4 s and the pids limit ended the sandbox.
      const sandbox = await provider.create()
      const loop = await sandbox.start('sh', [
        '-c',
        'i=0; while :; do i=$((i+1)); echo $i > /tmp/churn.new; mv /tmp/churn.new /tmp/churn; done',
      ])
      const container = docker.getContainer(`cordon-${sandbox.id}`)
      const { HostConfig } = await container.inspect()
      let mostPids = 0
      for (let second = 0; second < 10; second++) {
        await new Promise((resolve) => setTimeout(resolve, 1_000))
        const stats = (await container.stats({ stream: false })) as {
          pids_stats?: { current?: number }
        }
        mostPids = Math.max(mostPids, stats.pids_stats?.current ?? 0)
      }
      const count = Number((await sandbox.exec('cat', ['/tmp/churn'])).stdout.trim())
      console.log(
        `${runtime}: ${count} commands in 10 s, at most ${mostPids} host pids of ${HostConfig.PidsLimit}`,
      )
      expect(count).toBeGreaterThan(100)
      expect(sandbox.endReason).toBeUndefined()
      expect(mostPids).toBeGreaterThan(0)
      expect(mostPids).toBeLessThan(HostConfig.PidsLimit! / 2)
      await loop.kill()
      await sandbox.destroy()
    }, 60_000)
  })
}
