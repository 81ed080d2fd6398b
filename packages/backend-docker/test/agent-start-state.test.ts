/**
 * A Docker sandbox's agent starts from the startup snapshot (under gVisor)
 * and the V8 code cache made when the runtime volume was filled
 * (agent-start-state.ts; the agent's snapshot-warm-up.ts and
 * code-cache-loader.ts say why: under gVisor each compile in a sandbox's
 * first second costs system calls). Checked inside real sandboxes: under
 * gVisor the container's entry starts Node from the volume's snapshot with
 * the program, under runc on the loader, and the same start, run again as
 * root in the container with the entry's own Node, binary and options, says
 * whether it started from the snapshot and that V8 accepted the volume's
 * code cache.
 */
import { readFileSync } from 'node:fs'
import { writeFile } from 'node:fs/promises'
import { describe, expect, it } from 'vitest'
import { RUNTIME_MOUNT } from '../src/agent-runtime.js'
import { type StartStateMakers, withStartState } from '../src/agent-start-state.js'
import type { HostFile } from '../src/host-files-archive.js'
import { engineExec } from './engine-exec.js'
import { docker, testProvider } from './test-run.js'

describe("a Docker sandbox's agent starts from the runtime volume's snapshot (gVisor) and code cache", () => {
  for (const runtime of ['runc', 'runsc'] as const) {
    const fromSnapshot = runtime === 'runsc'
    it(`${runtime}: the entry starts Node ${fromSnapshot ? 'from the snapshot' : 'on the loader'}, and V8 takes the volume's cache for the entry's Node and options`, async () => {
      const provider = testProvider({ runtime })
      try {
        const sandbox = await provider.create()
        expect((await sandbox.exec('true')).exitCode).toBe(0)
        const name = `cordon-${sandbox.id}`
        const entry = (await docker.getContainer(name).inspect()).Config.Entrypoint as string[]
        if (fromSnapshot) {
          const blob = entry.indexOf('--snapshot-blob')
          expect(blob).toBeGreaterThan(0)
          expect(entry.slice(blob + 1)).toEqual([
            `${RUNTIME_MOUNT}/agent.blob`,
            `${RUNTIME_MOUNT}/agent.cjs`,
          ])
        } else {
          expect(entry).not.toContain('--snapshot-blob')
          expect(entry.slice(-2)).toEqual([
            `${RUNTIME_MOUNT}/agent-loader.cjs`,
            `${RUNTIME_MOUNT}/agent.cjs`,
          ])
        }
        // The agent as the entry starts it (past cordon-launcher, which only starts it).
        const agent = entry[1] === '--agent' ? entry.slice(2) : entry
        if (runtime === 'runsc') expect(agent).toContain('--v8-pool-size=1')
        expect(await engineExec(name, [...agent, '--startup-snapshot'], { user: '0' })).toEqual({
          exitCode: 0,
          output: fromSnapshot ? 'yes\n' : 'no\n',
        })
        expect(await engineExec(name, [...agent, '--code-cache'], { user: '0' })).toEqual({
          exitCode: 0,
          output: 'used\n',
        })
      } finally {
        await provider.close()
      }
    })
  }
})

describe('filling the runtime volume with the snapshot and the code cache', () => {
  const files: HostFile[] = [
    { name: 'bin/node', source: process.execPath, mode: 0o755 },
    { name: 'agent.cjs', source: '/dev/null', mode: 0o644 },
  ]
  const makes = (bytes: string) => async (options: { out: string }) => {
    await writeFile(options.out, bytes)
  }
  const fails = (message: string) => async () => {
    throw new Error(message)
  }

  it("adds agent.blob and agent.cjs.cache, made with the runtime's Node, the cache from the snapshot", async () => {
    let filled: HostFile[] = []
    const contents: Record<string, string> = {}
    let cacheFrom: string | undefined
    const made = await withStartState(
      files,
      async (given) => {
        filled = given
        for (const file of given.slice(2)) contents[file.name] = readFileSync(file.source, 'utf8')
      },
      {
        snapshot: async (options) => {
          expect(options.nodePath).toBe(process.execPath)
          await makes('snapshot')(options)
        },
        codeCache: async (options) => {
          expect(options.nodePath).toBe(process.execPath)
          // The agent runs from the snapshot just made, as the entry will run it.
          cacheFrom = options.snapshot && readFileSync(options.snapshot, 'utf8')
          await makes('compiled')(options)
        },
      },
    )
    expect(made).toEqual({ snapshot: true })
    expect(filled.map((file) => file.name)).toEqual([
      'bin/node',
      'agent.cjs',
      'agent.blob',
      'agent.cjs.cache',
    ])
    expect(contents).toEqual({ 'agent.blob': 'snapshot', 'agent.cjs.cache': 'compiled' })
    expect(cacheFrom).toBe('snapshot')
  })

  it('makes the cache without the launcher where the launcher cannot run on this host', async () => {
    const withLauncher = [
      ...files,
      { name: 'bin/cordon-launcher', source: '/bin/true', mode: 0o755 },
    ]
    let filled: HostFile[] = []
    const asked: Array<string | undefined> = []
    await withStartState(
      withLauncher,
      async (given) => {
        filled = given
      },
      {
        snapshot: makes('snapshot'),
        codeCache: async (options) => {
          asked.push(options.launcher)
          if (options.launcher) throw new Error('the launcher could not run')
          await makes('compiled')(options)
        },
      },
    )
    expect(asked).toEqual(['/bin/true', undefined])
    expect(filled.map((file) => file.name)).toContain('agent.cjs.cache')
  })

  it('without a snapshot, the cache is made from the loader run as a script, and the volume says so', async () => {
    let filled: HostFile[] = []
    let cacheFrom: string | undefined = 'not asked'
    const made = await withStartState(
      files,
      async (given) => {
        filled = given
      },
      {
        snapshot: fails('the snapshot could not be built'),
        codeCache: async (options) => {
          cacheFrom = options.snapshot
          await makes('compiled')(options)
        },
      },
    )
    expect(made).toEqual({ snapshot: false })
    expect(cacheFrom).toBeUndefined()
    expect(filled.map((file) => file.name)).toEqual(['bin/node', 'agent.cjs', 'agent.cjs.cache'])
  })

  it('fills without either where neither can be made (the agent then starts as a script and compiles from source)', async () => {
    let filled: HostFile[] = []
    const makers: StartStateMakers = {
      snapshot: fails('the snapshot could not be built'),
      codeCache: fails('the agent ended during its warm-up'),
    }
    const made = await withStartState(
      files,
      async (given) => {
        filled = given
      },
      makers,
    )
    expect(made).toEqual({ snapshot: false })
    expect(filled.map((file) => file.name)).toEqual(['bin/node', 'agent.cjs'])
  })
})
