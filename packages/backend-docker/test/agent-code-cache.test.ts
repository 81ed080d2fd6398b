/**
 * A Docker sandbox's agent starts from the V8 code cache made when the
 * runtime volume was filled (agent-runtime.ts `withCodeCache`; the agent's
 * code-cache-loader.ts says why: under gVisor each compile in a sandbox's
 * first second costs system calls). Checked inside real sandboxes: the
 * container's entry is the loader, and the same start, run again as root in
 * the container with the entry's own Node, binary and options, finds the
 * volume's cache accepted by V8.
 */
import { readFileSync } from 'node:fs'
import { writeFile } from 'node:fs/promises'
import { describe, expect, it } from 'vitest'
import { RUNTIME_MOUNT, withCodeCache } from '../src/agent-runtime.js'
import type { HostFile } from '../src/host-files-archive.js'
import { engineExec } from './engine-exec.js'
import { docker, testProvider } from './test-run.js'

describe("a Docker sandbox's agent starts from the runtime volume's code cache", () => {
  for (const runtime of ['runc', 'runsc'] as const) {
    it(`${runtime}: the entry is the loader, and V8 takes the volume's cache for the entry's Node and options`, async () => {
      const provider = testProvider({ runtime })
      try {
        const sandbox = await provider.create()
        expect((await sandbox.exec('true')).exitCode).toBe(0)
        const name = `cordon-${sandbox.id}`
        const entry = (await docker.getContainer(name).inspect()).Config.Entrypoint as string[]
        const loader = entry.indexOf(`${RUNTIME_MOUNT}/agent-loader.cjs`)
        expect(loader).toBeGreaterThan(0)
        expect(entry[loader + 1]).toBe(`${RUNTIME_MOUNT}/agent.cjs`)
        // The agent as the entry starts it (past cordon-launcher, which only starts it).
        const agent = entry[1] === '--agent' ? entry.slice(2) : entry
        if (runtime === 'runsc') expect(agent).toContain('--v8-pool-size=1')
        const said = await engineExec(name, [...agent, '--code-cache'], { user: '0' })
        expect(said).toEqual({ exitCode: 0, output: 'used\n' })
      } finally {
        await provider.close()
      }
    })
  }
})

describe('filling the runtime volume with the code cache', () => {
  const files: HostFile[] = [
    { name: 'bin/node', source: process.execPath, mode: 0o755 },
    { name: 'agent.cjs', source: '/dev/null', mode: 0o644 },
  ]

  it("adds agent.cjs.cache, made with the runtime's Node, to what the volume is filled with", async () => {
    let filled: HostFile[] = []
    let cache = ''
    await withCodeCache(
      files,
      async (given) => {
        filled = given
        cache = readFileSync(given.find((file) => file.name === 'agent.cjs.cache')!.source, 'utf8')
      },
      async (options) => {
        expect(options.nodePath).toBe(process.execPath)
        await writeFile(options.out, 'compiled')
      },
    )
    expect(filled.map((file) => file.name)).toEqual(['bin/node', 'agent.cjs', 'agent.cjs.cache'])
    expect(cache).toBe('compiled')
  })

  it('makes it without the launcher where the launcher cannot run on this host', async () => {
    const withLauncher = [
      ...files,
      { name: 'bin/cordon-launcher', source: '/bin/true', mode: 0o755 },
    ]
    let filled: HostFile[] = []
    const asked: Array<string | undefined> = []
    await withCodeCache(
      withLauncher,
      async (given) => {
        filled = given
      },
      async (options) => {
        asked.push(options.launcher)
        if (options.launcher) throw new Error('the launcher could not run')
        await writeFile(options.out, 'compiled')
      },
    )
    expect(asked).toEqual(['/bin/true', undefined])
    expect(filled.map((file) => file.name)).toContain('agent.cjs.cache')
  })

  it('fills without it where it cannot be made (the agent then compiles from source)', async () => {
    let filled: HostFile[] = []
    await withCodeCache(
      files,
      async (given) => {
        filled = given
      },
      async () => {
        throw new Error('the agent ended during its warm-up')
      },
    )
    expect(filled.map((file) => file.name)).toEqual(['bin/node', 'agent.cjs'])
  })
})
