import { hostname } from 'node:os'
import type { CordonSandbox, CordonSandboxProvider } from '@cordon/core'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { docker, testProvider } from './test-run.js'

/** Reads one field of /proc/self/status as seen by a process inside the sandbox. */
async function statusField(sandbox: CordonSandbox, field: string): Promise<string> {
  const result = await sandbox.exec('grep', [`^${field}:`, '/proc/self/status'])
  return result.stdout.split(':')[1]?.trim() ?? ''
}

async function containerOf(sandbox: CordonSandbox) {
  return docker.getContainer(`cordon-${sandbox.id}`).inspect()
}

for (const runtime of ['docker', 'runsc'] as const) {
  describe(`hardened by default (${runtime})`, () => {
    let provider: CordonSandboxProvider
    let sandbox: CordonSandbox

    beforeAll(async () => {
      provider = testProvider({ runtime, cpus: 1 })
      sandbox = await provider.create({ memoryLimitMb: 128, maxProcesses: 64 })
    })
    afterAll(async () => {
      await provider.close()
    })

    it('runs as a non-root user', async () => {
      expect((await sandbox.exec('id', ['-u'])).stdout.trim()).toBe('1000')
      expect((await sandbox.exec('id', ['-g'])).stdout.trim()).toBe('1000')
    })

    it('holds no capabilities, effective, permitted or bounding', async () => {
      // gVisor's /proc does not report the ambient set.
      for (const field of runtime === 'runsc'
        ? ['CapEff', 'CapPrm', 'CapBnd']
        : ['CapEff', 'CapPrm', 'CapBnd', 'CapAmb']) {
        expect(Number.parseInt(await statusField(sandbox, field), 16), field).toBe(0)
      }
    })

    it('cannot gain privileges (no-new-privileges)', async () => {
      const info = await containerOf(sandbox)
      expect(info.HostConfig.SecurityOpt).toContain('no-new-privileges:true')
      // gVisor's /proc has no NoNewPrivs line; under runc the kernel reports the flag.
      if (runtime === 'docker') expect(await statusField(sandbox, 'NoNewPrivs')).toBe('1')
    })

    it('has a read-only root filesystem and a small writable /tmp', async () => {
      // The image's home directory belongs to the sandbox user, so only the read-only mount can refuse this.
      const touch = await sandbox.exec('touch', ['/home/sandbox/cordon-was-here'])
      expect(touch.exitCode).not.toBe(0)
      expect(touch.stderr).toMatch(/read-only/i)
      expect((await sandbox.exec('sh', ['-c', 'echo ok > /tmp/x && cat /tmp/x'])).stdout).toBe(
        'ok\n',
      )
      const fill = await sandbox.exec('dd', ['if=/dev/zero', 'of=/tmp/fill', 'bs=1M', 'count=100'])
      expect(fill.exitCode).not.toBe(0)
      expect(fill.stderr).toMatch(/no space/i)
      await sandbox.exec('rm', ['-f', '/tmp/fill'])
    })

    it('runs under an init process as PID 1', async () => {
      const init = await sandbox.exec('cat', ['/proc/1/cmdline'])
      expect(init.stdout.split('\0')[0]).toMatch(/init/)
    })

    it('is not privileged: mounting fails', async () => {
      const mount = await sandbox.exec('mount', ['-t', 'tmpfs', 'none', '/tmp'])
      expect(mount.exitCode).not.toBe(0)
    })

    it('has private pid, uts and network namespaces', async () => {
      const ps = await sandbox.exec('ps', ['-o', 'pid'])
      expect(ps.stdout.trim().split('\n').length).toBeLessThan(10)
      expect((await sandbox.exec('hostname')).stdout.trim()).not.toBe(hostname())
      const info = await containerOf(sandbox)
      expect(info.HostConfig.PidMode || '').toBe('')
      expect(info.HostConfig.NetworkMode).toBe('none')
      expect(info.HostConfig.IpcMode).toBe('private')
      expect(info.HostConfig.UsernsMode || '').toBe('')
      expect(info.HostConfig.Privileged).toBe(false)
    })

    it('never sees the engine socket', async () => {
      const socket = await sandbox.exec('ls', ['/var/run/docker.sock', '/run/docker.sock'])
      expect(socket.exitCode).not.toBe(0)
      const info = await containerOf(sandbox)
      expect(JSON.stringify(info.Mounts)).not.toContain('docker.sock')
    })

    it('sets memory swap equal to memory and the pids and CPU limits', async () => {
      const info = await containerOf(sandbox)
      expect(info.HostConfig.Memory).toBe(128 * 1024 * 1024)
      expect(info.HostConfig.MemorySwap).toBe(128 * 1024 * 1024)
      if (runtime === 'docker') expect(info.HostConfig.PidsLimit).toBe(64)
      else expect(info.HostConfig.Ulimits).toEqual([{ Name: 'nproc', Soft: 64, Hard: 64 }])
      expect(info.HostConfig.NanoCpus).toBe(1e9)
      expect(info.HostConfig.CapDrop).toEqual(['ALL'])
      expect(info.HostConfig.ReadonlyRootfs).toBe(true)
      expect(info.HostConfig.Init).toBe(true)
      // cordon never passes a seccomp option, so the engine's default profile applies.
      expect(info.HostConfig.SecurityOpt).toEqual(['no-new-privileges:true'])
    })

    it('labels the container with its owner', async () => {
      const info = await containerOf(sandbox)
      expect(info.Config.Labels).toMatchObject({
        'cordon.managed': '1',
        'cordon.owner.pid': String(process.pid),
        'cordon.owner.host': hostname(),
        'cordon.sandbox': sandbox.id,
        'cordon.role': 'sandbox',
      })
      expect(info.Config.Labels['cordon.provider']).toBe(provider.instanceId)
    })

    it('runs under the requested runtime', async () => {
      const info = await containerOf(sandbox)
      expect(info.HostConfig.Runtime).toBe(runtime === 'runsc' ? 'runsc' : 'runc')
      const kernel = await sandbox.exec('dmesg')
      if (runtime === 'runsc') expect(kernel.stdout).toMatch(/gVisor/i)
      else expect(kernel.stdout).not.toMatch(/gVisor/i)
    })

    it('applies the CPU limit: two busy loops get about one core', async () => {
      const result = await sandbox.exec('sh', [
        '-c',
        // Busy loops for ~3 s of wall time, then report the CPU time the two of them used.
        'a=$(cut -d" " -f1 /proc/uptime); (timeout 3 sh -c "while :; do :; done" &); (timeout 3 sh -c "while :; do :; done" &); sleep 3.2; ' +
          'for f in /sys/fs/cgroup/cpuacct/cpuacct.usage /sys/fs/cgroup/cpu.stat; do [ -r $f ] && cat $f; done',
      ])
      const text = result.stdout
      let cpuSeconds: number
      if (/usage_usec/.test(text)) cpuSeconds = Number(/usage_usec (\d+)/.exec(text)![1]) / 1e6
      else cpuSeconds = Number(text.trim().split('\n')[0]) / 1e9
      // Two unconstrained loops on two cores would use ~6 s; one core allows ~3 s.
      expect(cpuSeconds).toBeLessThan(4.5)
    })
  })
}
