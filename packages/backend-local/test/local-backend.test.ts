import { spawn } from 'node:child_process'
import { existsSync } from 'node:fs'
import { mkdtemp, readdir, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { dirname, join } from 'node:path'
import { fileURLToPath } from 'node:url'
import {
  type CordonSandboxProvider,
  SandboxConfigValidationError,
  SandboxControlRefusedError,
} from '@cordon/core'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { createLocalSandboxProvider, localBackend } from '../src/index.js'
import { sweepDeadOwners } from '../src/workspace.js'

const BACKEND = { tier: 'process', runtime: 'local' } as const
const ALLOW_ALL = { kind: 'allow-all' } as const

let parent: string
beforeAll(async () => {
  parent = await mkdtemp(join(tmpdir(), 'cordon-local-test-'))
})
afterAll(async () => {
  await rm(parent, { recursive: true, force: true })
})

function provider(extra: Partial<Parameters<typeof createLocalSandboxProvider>[0]> = {}) {
  return createLocalSandboxProvider({
    backend: { ...BACKEND, workspaceParent: parent },
    defaultEgress: ALLOW_ALL,
    ...extra,
  })
}

async function refusal(
  promise: Promise<unknown> | (() => unknown),
): Promise<SandboxControlRefusedError> {
  let caught: unknown
  try {
    await (typeof promise === 'function' ? promise() : promise)
  } catch (error) {
    caught = error
  }
  expect(SandboxControlRefusedError.isInstance(caught), String(caught)).toBe(true)
  return caught as SandboxControlRefusedError
}

/** Pids of live processes whose command line contains `needle`. */
async function processesMatching(needle: string): Promise<number[]> {
  const { readFile } = await import('node:fs/promises')
  const found: number[] = []
  for (const entry of await readdir('/proc')) {
    if (!/^\d+$/.test(entry)) continue
    try {
      const stat = await readFile(`/proc/${entry}/stat`, 'latin1')
      if (stat.slice(stat.lastIndexOf(')') + 2).startsWith('Z')) continue
      const cmdline = (await readFile(`/proc/${entry}/cmdline`, 'utf8')).replaceAll('\0', ' ')
      if (cmdline.includes(needle)) found.push(Number(entry))
    } catch {
      // Gone while we looked.
    }
  }
  return found
}

async function until(check: () => Promise<boolean>, timeoutMs = 10_000): Promise<void> {
  const deadline = Date.now() + timeoutMs
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error('condition not met in time')
    await new Promise((resolve) => setTimeout(resolve, 50))
  }
}

describe('process:local declares only what it enforces', () => {
  it('declares no isolation, no limits, allow-all egress and its own usage fields', () => {
    const { enforcement } = localBackend
    expect(localBackend.name).toBe('process:local')
    expect(enforcement).toMatchObject({
      isolation: 'none',
      environment: 'basic',
      memoryLimit: false,
      processLimit: false,
      terminal: false,
      denyAllNetwork: false,
      egress: ['allow-all'],
    })
    expect(enforcement.measuredUsage).not.toContain('memoryPeakBytes')
  })

  it('refuses the default deny-all egress at create(), saying to name allow-all', async () => {
    const bare = createLocalSandboxProvider({ backend: BACKEND })
    try {
      const error = await refusal(bare.create())
      expect(error.control).toBe('egress.deny-all')
      expect(error.backend).toBe('process:local')
      expect(error.message).toContain("defaultEgress: { kind: 'allow-all' }")
    } finally {
      await bare.close()
    }
  })

  it('refuses limits and other egress policies, at construction and per call', async () => {
    expect((await refusal(() => provider({ defaultMemoryLimitMb: 256 }))).control).toBe(
      'defaultMemoryLimitMb',
    )
    expect((await refusal(() => provider({ defaultMaxProcesses: 8 }))).control).toBe(
      'defaultMaxProcesses',
    )
    expect(
      (await refusal(() => provider({ defaultEgress: { kind: 'static', allowedHosts: ['a.b'] } })))
        .control,
    ).toBe('egress.static')
    const local = provider()
    try {
      expect((await refusal(local.create({ memoryLimitMb: 64 }))).control).toBe('memoryLimitMb')
      expect((await refusal(local.create({ maxProcesses: 4 }))).control).toBe('maxProcesses')
      expect((await refusal(local.create({ egress: { kind: 'deny-all' } }))).control).toBe(
        'egress.deny-all',
      )
    } finally {
      await local.close()
    }
  })

  it('validates its config, every problem at once', () => {
    let caught: unknown
    try {
      createLocalSandboxProvider({
        backend: { ...BACKEND, workspaceParent: 'relative', readyTimeoutMs: -1 },
        defaultEgress: ALLOW_ALL,
      })
    } catch (error) {
      caught = error
    }
    expect(SandboxConfigValidationError.isInstance(caught)).toBe(true)
    const paths = (caught as SandboxConfigValidationError).issues.map((issue) => issue.path)
    expect(paths.join(' ')).toContain('workspaceParent')
    expect(paths.join(' ')).toContain('readyTimeoutMs')
  })
})

describe('process:local layout', () => {
  it('maps an ephemeral outputs mount to the workspace, the default working directory', async () => {
    const local = provider({ layout: { outputs: { source: { type: 'ephemeral' } } } })
    try {
      await using sandbox = await local.create()
      expect((await sandbox.exec('pwd')).stdout).toBe(`${sandbox.rootDir}\n`)
      expect(sandbox.rootDir.startsWith(parent)).toBe(true)
    } finally {
      await local.close()
    }
  })

  it('refuses a host directory, another role and noexec, naming layout.<role>', async () => {
    const cases = [
      [{ outputs: { source: { type: 'hostDir', hostPath: parent } } }, 'layout.outputs'],
      [
        {
          outputs: { source: { type: 'ephemeral' } },
          uploads: { source: { type: 'hostDir', hostPath: parent } },
        },
        'layout.uploads',
      ],
      [{ outputs: { source: { type: 'ephemeral' }, noexec: true } }, 'layout.outputs.noexec'],
    ] as const
    for (const [layout, control] of cases) {
      const local = provider({ layout })
      try {
        expect((await refusal(local.create())).control).toBe(control)
      } finally {
        await local.close()
      }
    }
  })
})

describe('process:local sandboxes', () => {
  let local: CordonSandboxProvider
  beforeAll(() => {
    local = provider()
  })
  afterAll(async () => {
    await local.close()
  })

  it('reports what is enforced: nothing but the workspace and allow-all', async () => {
    await using sandbox = await local.create()
    expect(sandbox.environment).toBe('basic')
    expect(sandbox.enforced).toMatchObject({
      backend: 'process:local',
      isolation: 'none',
      egress: { kind: 'allow-all' },
      limits: {},
      mounts: [{ path: sandbox.rootDir, access: 'read-write', noexec: false }],
    })
  })

  it("measures its own processes and workspace, not the host's", async () => {
    await using sandbox = await local.create()
    const quiet = await sandbox.stats()
    const sleepers = await Promise.all([1, 2, 3].map(() => sandbox.start('sleep', ['30'])))
    try {
      await sandbox.exec('sh', ['-c', 'i=0; while [ $i -lt 200000 ]; do i=$((i+1)); done'])
      await sandbox.writeFile('probe.bin', new Uint8Array(50_000))
      const busy = await sandbox.stats()
      // The agent and the three sleepers; the host runs far more than that.
      expect(busy.processes).toBe((quiet.processes ?? 0) + 3)
      expect(busy.processes).toBeLessThan(10)
      expect(busy.cpuTimeMs).toBeGreaterThan(quiet.cpuTimeMs ?? 0)
      expect(busy.memoryBytes).toBeGreaterThan(0)
      expect(busy.diskBytes).toBeGreaterThanOrEqual(50_000)
      expect(busy.memoryPeakBytes).toBeUndefined()
    } finally {
      for (const sleeper of sleepers) await sleeper.kill('SIGKILL')
    }
  })

  it('destroy ends every process its commands left and removes the workspace', async () => {
    const sandbox = await local.create()
    const needle = `${Math.floor(Math.random() * 1e6) + 3e6}`
    await sandbox.exec('sh', ['-c', `setsid sleep ${needle} >/dev/null 2>&1 & exit 0`])
    expect(await processesMatching(`sleep ${needle}`)).toHaveLength(1)
    await sandbox.destroy()
    expect(await processesMatching(`sleep ${needle}`)).toEqual([])
    expect(existsSync(dirname(sandbox.rootDir))).toBe(false)
  })
})

describe('process:local leaves nothing behind when its host dies', () => {
  it("the agent ends with the host's death, and the next create() sweeps the workspace", async () => {
    const own = await mkdtemp(join(parent, 'host-death-'))
    const needle = `${Math.floor(Math.random() * 1e6) + 5e6}`
    const host = spawn(
      process.execPath,
      [fileURLToPath(new URL('./fixtures/dying-host.mjs', import.meta.url)), own, needle],
      { stdio: ['ignore', 'pipe', 'inherit'] },
    )
    const line = await new Promise<string>((resolve, reject) => {
      let out = ''
      host.stdout!.on('data', (chunk: Buffer) => {
        out += chunk.toString()
        if (out.includes('\n')) resolve(out.split('\n')[0]!)
      })
      host.once('exit', (code) => reject(new Error(`host exited with ${code}`)))
    })
    const { rootDir } = JSON.parse(line) as { rootDir: string }
    expect(await processesMatching(`sleep ${needle}`)).toHaveLength(1)

    host.kill('SIGKILL')
    await until(async () => (await processesMatching(`sleep ${needle}`)).length === 0)
    // Nothing can run at a SIGKILL: the workspace stays until the next create() here.
    expect(existsSync(rootDir)).toBe(true)

    const next = createLocalSandboxProvider({
      backend: { ...BACKEND, workspaceParent: own },
      defaultEgress: ALLOW_ALL,
    })
    try {
      await using sandbox = await next.create()
      expect(existsSync(dirname(rootDir))).toBe(false)
      expect(existsSync(sandbox.rootDir)).toBe(true)
    } finally {
      await next.close()
    }
  })

  it("a sweep never removes a live owner's workspace", async () => {
    const own = await mkdtemp(join(parent, 'live-owner-'))
    const local = createLocalSandboxProvider({
      backend: { ...BACKEND, workspaceParent: own },
      defaultEgress: ALLOW_ALL,
    })
    try {
      await using sandbox = await local.create()
      expect(await sweepDeadOwners(own)).toEqual([])
      expect(existsSync(sandbox.rootDir)).toBe(true)
    } finally {
      await local.close()
    }
  })
})
