import { connect } from 'node:net'
import {
  AgentRemoteError,
  authenticateToAgent,
  FramedConnection,
  requestHealth,
} from '@cordon/agent/protocol'
import type { CordonSandbox, CordonSandboxProvider } from '@cordon/core'
import { closeTestArmStandin, type TestArmStandin } from '@cordon/test-support'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { SECRET_CONFIG_MAP_KEY } from '../src/index.js'
import { startTestStandin, testProvider } from './standin-fixture.js'

/**
 * What a claimed sandbox enforces, proved from inside one: the profile's
 * memory and process limits (the only values a claim accepts), deny-all as
 * the pool's subnet gives it, the per-claim secret, and the entrypoint's
 * duties as PID 1.
 */
describe('enforced from inside a claimed sandbox', () => {
  let standin: TestArmStandin | undefined
  let provider: CordonSandboxProvider | undefined
  let sandbox: CordonSandbox | undefined
  beforeAll(async () => {
    // Small limits keep the memory and fork bombs quick on a shared machine.
    standin = await startTestStandin({ poolSize: 2, profile: { memoryMb: 128, maxProcesses: 48 } })
    provider = testProvider(standin)
    sandbox = await provider.create()
  })
  afterAll(async () => {
    await provider?.close()
    await closeTestArmStandin(standin)
  })

  it("reports the profile's limits as what holds, and the rest of what is enforced", () => {
    expect(sandbox!.enforced).toMatchObject({
      backend: 'container:aci-standby-pool',
      isolation: 'container',
      egress: { kind: 'deny-all' },
      limits: { memoryLimitMb: 128, maxProcesses: 48 },
      mounts: [{ path: '/mnt/user-data/outputs', access: 'read-write', noexec: false }],
    })
    expect(provider!.enforcement.memoryLimit).toBe(false)
  })

  it("kills a process that exceeds the profile's memory and reports it; the sandbox goes on", async () => {
    const result = await sandbox!.exec(
      'sh',
      ['-c', 'x=aaaaaaaaaaaaaaaa; while :; do x="$x$x"; done'],
      { timeout: 30_000 },
    )
    expect(result.timedOut).toBe(false)
    expect(result.exitCode).not.toBe(0)
    expect(result.oomKilled).toBe(true)
    expect((await sandbox!.exec('echo', ['still here'])).stdout).toBe('still here\n')
  })

  it("fails fork past the profile's process limit, and recovers", async () => {
    const limit = await sandbox!.exec('sh', ['-c', 'ulimit -u'])
    expect(limit.stdout.trim()).toBe('48')
    const result = await sandbox!.exec(
      'sh',
      // Each child lives long enough that the first are still there when the
      // last are forked, however slow forking is on a loaded machine (with
      // `sleep 2`, 80 forks once took longer than the first children lived).
      ['-c', 'n=0; while [ $n -lt 80 ]; do sleep 8 & n=$((n+1)); done; echo started $n; wait'],
      { timeout: 30_000 },
    )
    expect(`${result.stdout}${result.stderr}`).toMatch(
      /can't fork|Resource temporarily unavailable/i,
    )
    await new Promise((resolve) => setTimeout(resolve, 1_000))
    expect((await sandbox!.exec('echo', ['recovered'])).stdout).toBe('recovered\n')
  })

  it('has no way out under deny-all: no DNS, no TCP or UDP to public, link-local or private addresses', async () => {
    const targets = ['1.1.1.1 443', '169.254.169.254 80', '10.0.0.1 80', '192.168.0.1 80']
    const [dns, udp, ...attempts] = await Promise.all([
      sandbox!.exec('nslookup', ['example.com', '8.8.8.8'], { timeout: 15_000 }),
      sandbox!.exec('sh', ['-c', 'echo ping | nc -u -w 1 8.8.8.8 53 && echo sent'], {
        timeout: 15_000,
      }),
      ...targets.map((target) => {
        const [host, port] = target.split(' ')
        return sandbox!.exec('nc', ['-w', '2', host!, port!], {
          stdin: 'GET / HTTP/1.0\r\n\r\n',
          timeout: 15_000,
        })
      }),
    ])
    expect(dns!.exitCode).not.toBe(0)
    expect(dns!.stdout).not.toMatch(/Address:?\s+\d+\.\d+\.\d+\.\d+\s*$/m)
    expect(udp!.stdout).not.toContain('sent')
    for (const [index, attempt] of attempts.entries())
      expect(attempt.exitCode, targets[index]).not.toBe(0)
  })

  it("is reachable only with its own claim's secret", async () => {
    const other = await provider!.create()
    try {
      const groups = await Promise.all(standin!.groups().map((name) => readGroup(standin!, name)))
      expect(groups).toHaveLength(2)
      const [first, second] = groups as [ClaimedGroupView, ClaimedGroupView]
      expect(first.secret).not.toBe(second.secret)
      expect(first.secret).toMatch(/^[A-Za-z0-9_-]{43}$/)
      expect((await healthWith(second.ip, second.secret)).agentVersion).toBeTruthy()
      const refused = await healthWith(second.ip, first.secret).catch((error: unknown) => error)
      expect(refused).toBeInstanceOf(AgentRemoteError)
      expect((refused as AgentRemoteError).code).toBe('unauthorized')
    } finally {
      await other.destroy()
    }
  })

  it('runs commands without the secret in their environment and as a non-root user without capabilities', async () => {
    const env = await sandbox!.exec('env')
    expect(env.stdout).not.toMatch(/CORDON_AGENT|CORDON_ACI|CORDON_MAX/)
    const id = await sandbox!.exec('id', ['-u'])
    expect(Number(id.stdout.trim())).toBeGreaterThan(0)
    const status = await sandbox!.exec('grep', ['CapEff', '/proc/self/status'])
    expect(status.stdout).toMatch(/CapEff:\s+0+\n/)
  })

  it('reaps orphaned commands (the entrypoint is PID 1, as ACI has no init)', async () => {
    const init = await sandbox!.exec('cat', ['/proc/1/cmdline'])
    expect(init.stdout.replaceAll('\0', ' ')).toContain('cordon-aci-entrypoint.sh')
    await sandbox!.exec('sh', ['-c', "(setsid sh -c 'sleep 0.2' &); (setsid sh -c 'sleep 0.2' &)"])
    // Asked until both orphans have ended and nothing is left a zombie (a
    // loaded machine's sleeps end late): without a reaper the zombies stay.
    const zombies = (stdout: string) => stdout.split('\n').filter((line) => /^\s*Z/.test(line))
    let ps = await sandbox!.exec('ps', ['-o', 'stat,args'])
    for (
      let tries = 0;
      tries < 100 && (zombies(ps.stdout).length > 0 || ps.stdout.includes('sleep 0.2'));
      tries++
    ) {
      await new Promise((resolve) => setTimeout(resolve, 100))
      ps = await sandbox!.exec('ps', ['-o', 'stat,args'])
    }
    expect(ps.stdout).not.toContain('sleep 0.2')
    expect(zombies(ps.stdout)).toEqual([])
  })
})

interface ClaimedGroupView {
  readonly ip: string
  readonly secret: string
}

/** Reads a claimed group through ARM, as anyone with Reader on the resource group can. */
async function readGroup(standin: TestArmStandin, name: string): Promise<ClaimedGroupView> {
  const response = await fetch(
    `${standin.url}/subscriptions/${standin.ids.subscriptionId}/resourceGroups/${standin.ids.resourceGroup}/providers/Microsoft.ContainerInstance/containerGroups/${name}?api-version=2025-09-01`,
    { headers: { authorization: `Bearer ${standin.token}` } },
  )
  const group = (await response.json()) as {
    properties: {
      ipAddress: { ip: string }
      containers: Array<{ properties: { configMap: { keyValuePairs: Record<string, string> } } }>
    }
  }
  return {
    ip: group.properties.ipAddress.ip,
    secret:
      group.properties.containers[0]!.properties.configMap.keyValuePairs[SECRET_CONFIG_MAP_KEY]!,
  }
}

async function healthWith(ip: string, secret: string) {
  const connection = new FramedConnection(connect(2024, ip))
  try {
    await authenticateToAgent(connection, secret)
    return await requestHealth(connection)
  } finally {
    connection.destroy()
  }
}
