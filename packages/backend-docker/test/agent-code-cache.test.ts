/**
 * A Docker sandbox's agent starts from the V8 code cache made when the
 * runtime volume was filled (agent-runtime.ts `withCodeCache`; the agent's
 * code-cache-loader.ts says why: under gVisor each compile in a sandbox's
 * first second costs system calls). Checked inside real sandboxes: the
 * container's entry is the loader, and the same start, run again as root in
 * the container with the entry's own Node, binary and options, finds the
 * volume's cache accepted by V8.
 */
import { describe, expect, it } from 'vitest'
import { RUNTIME_MOUNT } from '../src/agent-runtime.js'
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
