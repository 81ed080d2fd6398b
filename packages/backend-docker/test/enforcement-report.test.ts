import { afterAll, describe, expect, it } from 'vitest'
import { testProvider } from './test-run.js'

/**
 * `sandbox.enforced` says what holds for one sandbox; each figure is checked
 * here against what the sandbox itself sees from inside, under runc and gVisor.
 */
describe.each(['docker', 'runsc'] as const)('the enforcement report (%s)', (runtime) => {
  const provider = testProvider({ runtime, cpus: 1 })
  afterAll(async () => {
    await provider.close()
  })

  it('names what the backend declares, and each value holds inside the sandbox', async () => {
    expect(provider.enforcement).toMatchObject({
      isolation: runtime === 'runsc' ? 'user-space-kernel' : 'container',
      environment: 'linux-namespace',
      memoryLimit: true,
      processLimit: true,
    })
    await using sandbox = await provider.create({
      memoryLimitMb: 96,
      maxProcesses: 40,
      idleTimeoutMs: 60_000,
      lifetimeMs: 120_000,
      timeoutMs: 9_000,
    })
    const report = sandbox.enforced
    expect(report).toMatchObject({
      backend: `container:${runtime}`,
      isolation: provider.enforcement.isolation,
      runtime: runtime === 'runsc' ? 'runsc' : 'runc',
      egress: { kind: 'deny-all' },
      limits: { memoryLimitMb: 96, maxProcesses: 40, cpus: 1 },
      execTimeoutMs: 9_000,
      lifetimeMs: 120_000,
      idleTimeoutMs: 60_000,
    })
    expect(report.mounts).toEqual([
      { path: '/mnt/user-data/outputs', access: 'read-write', noexec: false },
      { path: '/tmp', access: 'read-write', noexec: false },
    ])
    // The user it says the commands run as is the one they run as.
    const ids = await sandbox.exec('sh', ['-c', 'id -u; id -g'])
    expect(ids.stdout.trim().split('\n').map(Number)).toEqual([report.user?.uid, report.user?.gid])
    // The process limit it reports is the one fork hits.
    const forks = await sandbox.exec('sh', [
      '-c',
      'i=0; while [ $i -lt 60 ]; do sleep 5 & i=$((i+1)); done 2>/dev/null; jobs -p | wc -l',
    ])
    expect(Number(forks.stdout.trim())).toBeLessThan(40)
  }, 120_000)

  it('reports the defaults the backend applied when the host named no limit', async () => {
    await using sandbox = await provider.create()
    expect(sandbox.enforced.limits).toMatchObject({ memoryLimitMb: 512, maxProcesses: 32 })
    expect(sandbox.enforced).not.toHaveProperty('lifetimeMs')
  }, 60_000)
})
