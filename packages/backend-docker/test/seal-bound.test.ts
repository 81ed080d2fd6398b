import { chmod, lstat, mkdtemp, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { SandboxDestroyedError, SandboxOperationError } from '@cordon/core'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { SEAL_WAIT_MS, shortenSealWaitForTest } from '../src/seal-wait.js'
import { engineExec } from './engine-exec.js'
import { docker, testProvider } from './test-run.js'

/**
 * The bound `destroy()` puts on the agent's seal of writable host
 * directories (seal-wait.ts): against an agent that never ends its seal,
 * `destroy()` gives up after the bound, fails naming the directories it
 * could not vouch for, and has still removed everything of the sandbox.
 * The real bound is 5 minutes; this file shortens it through the seam that
 * exists for it, which the package's index does not export.
 */
const BOUND_MS = 3_000

/** Runs `script` in the container as root, beside the agent, and returns its output. */
async function execAsRoot(name: string, script: string): Promise<string> {
  return (await engineExec(name, ['sh', '-c', script], { user: '0' })).output
}

/**
 * Stops the agent with SIGSTOP, from a process the engine starts in the
 * container (under gVisor the agent's process lives in gVisor's kernel,
 * out of the host's /proc): it can then neither seal nor end, which is what
 * an agent stuck in its seal looks like from the host. Resolves with the
 * agent's state as its /proc reads once stopped.
 */
async function stopAgent(name: string): Promise<string> {
  return execAsRoot(
    name,
    // The agent is the Node process cordon-launcher starts with its own loader.
    `for dir in /proc/[0-9]*; do
      if tr '\\0' ' ' < $dir/cmdline 2>/dev/null | grep -q '^/.cordon/lib/ld-linux.*agent.cjs'; then
        kill -STOP $(basename $dir) && sleep 0.2 && grep '^State:' $dir/status
      fi
    done`,
  )
}

describe('destroy() bounds its wait for the seal of writable host directories (Docker)', () => {
  let restoreBound: (() => void) | undefined
  beforeAll(() => {
    restoreBound = shortenSealWaitForTest(BOUND_MS)
  })
  afterAll(() => restoreBound?.())

  it('the bound is 5 minutes, and the seam can only shorten it', () => {
    expect(SEAL_WAIT_MS).toBe(5 * 60_000)
    expect(() => shortenSealWaitForTest(SEAL_WAIT_MS + 1)).toThrow(RangeError)
    expect(() => shortenSealWaitForTest(0)).toThrow(RangeError)
  })

  for (const runtime of ['docker', 'runsc'] as const) {
    it(`an agent stopped before its seal: destroy() fails naming the directory after the bound and leaves nothing of the sandbox (${runtime})`, async () => {
      const root = await mkdtemp(join(tmpdir(), 'cordon-seal-bound-'))
      await chmod(root, 0o1777)
      const provider = testProvider(
        { runtime },
        { layout: { outputs: { source: { type: 'hostDir', hostPath: root } } } },
      )
      try {
        // With egress, so that its registration with the provider's gateway is released too.
        const sandbox = await provider.create({
          egress: { kind: 'static', allowedHosts: ['upstream.test'] },
        })
        const name = `cordon-${sandbox.id}`
        const gateway = await docker.getContainer(`cordon-gateway-${provider.instanceId}`).inspect()
        expect(gateway.State.Running).toBe(true)
        const planted = await sandbox.exec('ln', ['-s', '/etc/shadow', 'shadow-link'], {
          cwd: sandbox.rootDir,
        })
        expect(planted.exitCode, planted.stderr).toBe(0)
        expect(await stopAgent(name)).toMatch(/^State:\s+T/m)

        const started = Date.now()
        const failure = await sandbox.destroy().then(
          () => undefined,
          (error: unknown) => error,
        )
        const waited = Date.now() - started
        expect(SandboxOperationError.isInstance(failure), String(failure)).toBe(true)
        expect((failure as SandboxOperationError).operation).toBe('destroy')
        expect((failure as Error).message).toContain(`still sealing ${root} after 3 s`)
        // It gave the agent the whole bound before giving up on it.
        expect(waited).toBeGreaterThanOrEqual(BOUND_MS)
        // Unusable, though destroy() failed: it says so, and a second destroy() has nothing left to do.
        expect(sandbox.status).toBe('destroyed')
        await expect(sandbox.exec('true')).rejects.toSatisfy(SandboxDestroyedError.isInstance)

        // The seal never ran: the link out it would have removed is there,
        // which is what the failure warns of.
        expect((await lstat(join(root, 'shadow-link'))).isSymbolicLink()).toBe(true)

        // Nothing of the sandbox is left on the engine, before the provider's close.
        await expect(docker.getContainer(name).inspect()).rejects.toMatchObject({ statusCode: 404 })
        const filters = { label: [`cordon.sandbox=${sandbox.id}`] }
        expect(await docker.listContainers({ all: true, filters })).toEqual([])
        expect((await docker.listVolumes({ filters })).Volumes ?? []).toEqual([])
        expect(await docker.listNetworks({ filters })).toEqual([])
        expect(await docker.listImages({ filters })).toEqual([])
        await sandbox.destroy()
      } finally {
        await provider.close()
        await rm(root, { recursive: true, force: true })
      }
      // And nothing of its provider (the egress gateway included) once that closes.
      const filters = { label: [`cordon.provider=${provider.instanceId}`] }
      expect(await docker.listContainers({ all: true, filters })).toEqual([])
      expect((await docker.listVolumes({ filters })).Volumes ?? []).toEqual([])
      expect(await docker.listNetworks({ filters })).toEqual([])
    })
  }
})
