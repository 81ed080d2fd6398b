import { SandboxPathError } from '@cordon/core'
import { describe, expect, it } from 'vitest'
import { testProvider } from './test-run.js'

describe('batch file transfer (writeFiles / readFiles)', () => {
  it('writes 2,000 files in one call and reads them back in one call', async () => {
    const provider = testProvider()
    try {
      const sandbox = await provider.create()
      const files = Array.from({ length: 2000 }, (_, index) => ({
        path: `tree/d${index % 20}/f${index}.txt`,
        content: `file ${index}\n`.repeat((index % 7) + 1),
      }))
      await sandbox.writeFiles!(files)
      const read = new Map<string, string>()
      for await (const file of await sandbox.readFiles!('tree')) {
        read.set(file.path, new TextDecoder().decode(file.content))
      }
      expect(read.size).toBe(2000)
      for (const file of files)
        expect(read.get(`${sandbox.rootDir}/${file.path}`)).toBe(file.content)
      // Owned by the sandbox user, so the sandbox can change them.
      const inside = await sandbox.exec('sh', [
        '-c',
        'echo more >> tree/d3/f3.txt && id -u && stat -c %u tree tree/d3 tree/d3/f3.txt',
      ])
      expect(inside.exitCode).toBe(0)
      const [uid, ...owners] = inside.stdout.trim().split('\n')
      expect(owners).toEqual([uid, uid, uid])
    } finally {
      await provider.close()
    }
  })

  it('refuses a path outside the writable mounts before writing anything, and yields nothing for a missing directory', async () => {
    const provider = testProvider()
    try {
      const sandbox = await provider.create()
      await expect(
        sandbox.writeFiles!([
          { path: 'fine.txt', content: 'x' },
          { path: '/etc/passwd', content: 'x' },
        ]),
      ).rejects.toSatisfy((error) => SandboxPathError.isInstance(error))
      expect(await sandbox.listFiles()).toEqual([])
      const none: unknown[] = []
      for await (const file of await sandbox.readFiles!('missing')) none.push(file)
      expect(none).toEqual([])
    } finally {
      await provider.close()
    }
  })
})
