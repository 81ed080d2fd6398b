import { chmod, mkdtemp, rm, writeFile } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { SandboxControlRefusedError, type SandboxFileChange } from '@cordon/core'
import { afterEach, describe, expect, it } from 'vitest'
import { testProvider } from './test-run.js'

/**
 * A watch of a host directory the sandbox shares: what a command does there
 * is seen under runc and gVisor; what the host does there is seen under
 * runc, and a watch that asks for it (`external`) is refused under gVisor,
 * whose kernel implements inotify inside the sandbox and never hears of the
 * host's writes.
 */

const roots: string[] = []
afterEach(async () => {
  for (const root of roots.splice(0)) await rm(root, { recursive: true, force: true })
})

async function hostDirectory(): Promise<string> {
  const root = await mkdtemp(join(tmpdir(), 'cordon-watch-'))
  await chmod(root, 0o1777)
  roots.push(root)
  return root
}

function hostDirProvider(runtime: 'docker' | 'runsc', root: string) {
  return testProvider(
    { runtime },
    { layout: { outputs: { source: { type: 'hostDir', hostPath: root } } } },
  )
}

async function nextChange(
  iterator: AsyncIterator<SandboxFileChange>,
  timeoutMs = 5_000,
): Promise<SandboxFileChange | 'none'> {
  let timer: ReturnType<typeof setTimeout> | undefined
  const none = new Promise<'none'>((resolve) => {
    timer = setTimeout(() => resolve('none'), timeoutMs)
  })
  try {
    const next = await Promise.race([iterator.next(), none])
    return next === 'none' ? 'none' : next.done ? 'none' : next.value
  } finally {
    clearTimeout(timer)
  }
}

describe('watching a shared host directory (Docker)', () => {
  for (const runtime of ['docker', 'runsc'] as const) {
    it(`sees a command's change there (${runtime})`, async () => {
      const root = await hostDirectory()
      const provider = hostDirProvider(runtime, root)
      try {
        const sandbox = await provider.create()
        const watch = await sandbox.watchDirectory(sandbox.rootDir)
        const iterator = watch[Symbol.asyncIterator]()
        await sandbox.exec('touch', [`${sandbox.rootDir}/from-command`])
        expect(await nextChange(iterator)).toEqual({
          type: 'created',
          path: `${sandbox.rootDir}/from-command`,
          isDirectory: false,
        })
        await watch.close()
      } finally {
        await provider.close()
      }
    }, 60_000)
  }

  it("reports the host's own writes with external under runc", async () => {
    const root = await hostDirectory()
    const provider = hostDirProvider('docker', root)
    try {
      const sandbox = await provider.create()
      const watch = await sandbox.watchDirectory(sandbox.rootDir, { external: true })
      const iterator = watch[Symbol.asyncIterator]()
      await writeFile(join(root, 'from-host'), 'written by the host')
      expect(await nextChange(iterator)).toEqual({
        type: 'created',
        path: `${sandbox.rootDir}/from-host`,
        isDirectory: false,
      })
      await watch.close()
    } finally {
      await provider.close()
    }
  }, 60_000)

  it('refuses a watch of outside changes under gVisor, which would not see them', async () => {
    const root = await hostDirectory()
    const provider = hostDirProvider('runsc', root)
    try {
      const sandbox = await provider.create()
      const refused = await sandbox
        .watchDirectory(sandbox.rootDir, { external: true })
        .catch((error: unknown) => error)
      expect(SandboxControlRefusedError.isInstance(refused)).toBe(true)
      expect(refused).toMatchObject({
        control: 'watchDirectory.external',
        backend: 'container:runsc',
      })
      // Why: without the promise, the host's write goes unseen there.
      const watch = await sandbox.watchDirectory(sandbox.rootDir)
      const iterator = watch[Symbol.asyncIterator]()
      await writeFile(join(root, 'from-host'), 'written by the host')
      expect(await nextChange(iterator, 1_500)).toBe('none')
      await watch.close()
    } finally {
      await provider.close()
    }
  }, 60_000)
})
