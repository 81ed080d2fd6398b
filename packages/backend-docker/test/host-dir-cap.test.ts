import { chmod, lstat, mkdtemp, readdir, rm, writeFile } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { SandboxConfigValidationError, SandboxError } from '@cordon/core'
import { engineLeftovers } from '@cordon/test-support'
import { afterEach, describe, expect, it } from 'vitest'
import { testProvider } from './test-run.js'

/**
 * Issue 17, item 4: a writable host directory is capped (`sizeMb`, default
 * 1 GiB). A bind mount has no size of its own, so the cap is held by the
 * kernel's file size limit for any one file, and by the agent, which ends
 * the sandbox (`storage-limit`) once the directory's total passes the cap.
 * Each case attacks from inside a real sandbox, under runc and gVisor.
 */

const MiB = 1024 * 1024
const CAP_MB = 16
/**
 * What a sandbox may write past the cap before the agent's next measurement
 * ends it: the check interval (100 ms) times how fast it writes to the page
 * cache. Generous for a loaded CI machine; before the cap, the same writer
 * filled the directory until the test's timeout (gigabytes).
 */
const OVERSHOOT_BOUND_MB = 256

const roots: string[] = []
afterEach(async () => {
  for (const root of roots.splice(0)) await rm(root, { recursive: true, force: true })
})

async function hostDirectory(): Promise<string> {
  const root = await mkdtemp(join(tmpdir(), 'cordon-cap-'))
  await chmod(root, 0o1777)
  roots.push(root)
  return root
}

/** Bytes of the regular files under `root`, as the host sees them. */
async function hostBytes(root: string): Promise<number> {
  let total = 0
  const pending = [root]
  while (pending.length > 0) {
    const directory = pending.pop()!
    for (const entry of await readdir(directory, { withFileTypes: true })) {
      const path = join(directory, entry.name)
      if (entry.isDirectory()) pending.push(path)
      else if (entry.isFile()) total += (await lstat(path)).size
    }
  }
  return total
}

function cappedProvider(runtime: 'docker' | 'runsc', root: string, sizeMb: number | undefined) {
  return testProvider(
    { runtime },
    {
      layout: {
        outputs: {
          source: { type: 'hostDir', hostPath: root, ...(sizeMb === undefined ? {} : { sizeMb }) },
        },
      },
    },
  )
}

describe('a writable host directory cannot grow past its cap (Docker)', () => {
  for (const runtime of ['docker', 'runsc'] as const) {
    it(`one file stops at the cap exactly, and the sandbox lives on (${runtime})`, async () => {
      const root = await hostDirectory()
      const provider = cappedProvider(runtime, root, CAP_MB)
      try {
        const sandbox = await provider.create()
        const written = await sandbox.exec(
          'sh',
          ['-c', `dd if=/dev/zero of=big bs=1M count=${CAP_MB * 4} 2>&1; echo "dd=$?"`],
          { cwd: sandbox.rootDir },
        )
        expect(written.stdout).not.toContain('dd=0')
        expect((await lstat(join(root, 'big'))).size).toBe(CAP_MB * MiB)
        // A file exactly at the cap, alone, is within it.
        expect((await sandbox.exec('rm', ['big'], { cwd: sandbox.rootDir })).exitCode).toBe(0)
        // The host's own write through the API is held to the same limit, with a typed error.
        const refused = await sandbox
          .writeFile('from-host.bin', Buffer.alloc(CAP_MB * MiB + 1))
          .catch((error: unknown) => error)
        expect(SandboxError.isInstance(refused), String(refused)).toBe(true)
        expect((await sandbox.exec('echo', ['alive'])).stdout).toBe('alive\n')
        expect(sandbox.endReason).toBeUndefined()
      } finally {
        await provider.close()
      }
    })

    it(`many files past the cap end the sandbox as storage-limit (${runtime})`, async () => {
      const root = await hostDirectory()
      const provider = cappedProvider(runtime, root, CAP_MB)
      try {
        const sandbox = await provider.create()
        // Four writers at once, 1 MiB files, until something stops them.
        const flood = [
          'for w in 1 2 3 4; do',
          '  (i=0; while :; do head -c 1048576 /dev/zero > "w$w-$i" || exit 1; i=$((i+1)); done) &',
          'done',
          'wait',
        ].join('\n')
        const outcome = await sandbox
          .exec('sh', ['-c', flood], { cwd: sandbox.rootDir, timeout: 60_000 })
          .catch((error: unknown) => error)
        expect(
          SandboxError.isInstance(outcome) || (outcome as { exitCode?: number }).exitCode !== 0,
        ).toBe(true)
        for (let polled = 0; sandbox.endReason === undefined && polled < 400; polled++)
          await new Promise((resolve) => setTimeout(resolve, 50))
        expect(sandbox.endReason).toBe('storage-limit')
        const bytes = await hostBytes(root)
        console.log(
          `[host-dir-cap ${runtime}] cap ${CAP_MB} MiB, the directory held ${(bytes / MiB).toFixed(1)} MiB when the sandbox ended`,
        )
        expect(bytes).toBeGreaterThan(CAP_MB * MiB)
        expect(bytes).toBeLessThan((CAP_MB + OVERSHOOT_BOUND_MB) * MiB)
        // Nothing keeps writing after the end.
        await new Promise((resolve) => setTimeout(resolve, 500))
        expect(await hostBytes(root)).toBe(bytes)
      } finally {
        await provider.close()
      }
      expect((await engineLeftovers()).containers).toEqual([])
    })
  }

  it('a directory already past its cap is refused at create, with the cap named', async () => {
    const root = await hostDirectory()
    await writeFile(join(root, 'earlier.bin'), Buffer.alloc(9 * MiB))
    const provider = cappedProvider('docker', root, 8)
    try {
      const refused = await provider.create().catch((error: unknown) => error)
      expect(SandboxError.isInstance(refused), String(refused)).toBe(true)
      expect(String((refused as Error).message)).toContain(`over its cap of ${8 * MiB}`)
    } finally {
      await provider.close()
    }
    expect((await engineLeftovers()).containers).toEqual([])
  })

  it('a host directory that does not exist is refused at create as a config error naming its key', async () => {
    const missing = join(await hostDirectory(), 'not-made')
    const provider = cappedProvider('docker', missing, undefined)
    try {
      const refused = await provider.create().catch((error: unknown) => error)
      expect(SandboxConfigValidationError.isInstance(refused), String(refused)).toBe(true)
      expect((refused as SandboxConfigValidationError).issues).toEqual([
        {
          path: 'layout.outputs.source.hostPath',
          message: `host directory ${missing} does not exist on the engine's host; make it first`,
        },
      ])
    } finally {
      await provider.close()
    }
    // Nothing was made in its place, and nothing is left on the engine.
    await expect(lstat(missing)).rejects.toMatchObject({ code: 'ENOENT' })
    expect((await engineLeftovers()).containers).toEqual([])
  })

  it('the default cap is finite: 1 GiB per file, from inside', async () => {
    const root = await hostDirectory()
    const provider = cappedProvider('docker', root, undefined)
    try {
      const sandbox = await provider.create()
      const limits = await sandbox.exec('cat', ['/proc/self/limits'])
      expect(limits.stdout).toMatch(/Max file size\s+1073741824\s+1073741824\s+bytes/)
    } finally {
      await provider.close()
    }
  })
})
