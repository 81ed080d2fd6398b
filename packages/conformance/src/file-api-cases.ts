import {
  type CordonSandbox,
  SandboxControlRefusedError,
  type SandboxFileChange,
  SandboxFileNotFoundError,
  SandboxOperationError,
  SandboxPathError,
} from '@cordon/core'
import { describe, expect, it } from 'vitest'
import type { SandboxesUnderTest } from './shared-sandbox.js'
import type { SandboxConformanceOptions } from './suite-options.js'

async function refusal(promise: Promise<unknown>): Promise<unknown> {
  return promise.then(
    () => {
      throw new Error('expected a refusal')
    },
    (error: unknown) => error,
  )
}

/** A directory of its own under rootDir for one case, made by a command (as the sandbox's user). */
async function caseDirectory(sandbox: CordonSandbox, name: string): Promise<string> {
  const dir = `${sandbox.rootDir}/file-api-${name}`
  const made = await sandbox.exec('mkdir', ['-p', dir])
  expect(made.exitCode).toBe(0)
  return dir
}

/**
 * The file API beyond read, write and list (stat, remove, rename, make a
 * directory, watch), checked against what commands inside the sandbox do
 * and see, and against the same path rules as `writeFile`.
 */
export function fileApiCases(
  options: SandboxConformanceOptions,
  sandboxes: SandboxesUnderTest,
): void {
  const timeout = options.timeoutMs ?? 60_000

  describe('file API', () => {
    it(
      'stat sees what a command made, and a link as a link that never reveals what it leads to outside',
      async () => {
        const sandbox = sandboxes.sandbox
        const dir = await caseDirectory(sandbox, 'stat')
        const made = await sandbox.exec('sh', [
          '-c',
          `printf 1234567 > ${dir}/made && chmod 604 ${dir}/made && ln -s made ${dir}/near && ln -s /etc/passwd ${dir}/far`,
        ])
        expect(made).toMatchObject({ exitCode: 0, stderr: '' })
        const info = await sandbox.statFile(`${dir}/made`)
        expect(info).toMatchObject({ type: 'file', size: 7, mode: 0o604, isSymlink: false })
        expect(Math.abs(info.modifiedMs - Date.now())).toBeLessThan(120_000)
        expect((await sandbox.statFile(dir)).type).toBe('directory')
        expect(await sandbox.statFile(`${dir}/near`)).toMatchObject({
          type: 'symlink',
          isSymlink: true,
          symlinkTarget: 'made',
        })
        expect(await sandbox.statFile(`${dir}/near`, { followSymlinks: true })).toMatchObject({
          type: 'file',
          size: 7,
        })
        // Its own text only; followed, it is refused as a read of /etc/passwd is.
        expect(await sandbox.statFile(`${dir}/far`)).toMatchObject({
          type: 'symlink',
          size: '/etc/passwd'.length,
        })
        const followed = await refusal(sandbox.statFile(`${dir}/far`, { followSymlinks: true }))
        expect(SandboxPathError.isInstance(followed)).toBe(true)
        expect(SandboxPathError.isInstance(await refusal(sandbox.statFile('/etc/passwd')))).toBe(
          true,
        )
        expect(
          SandboxFileNotFoundError.isInstance(await refusal(sandbox.statFile(`${dir}/missing`))),
        ).toBe(true)
      },
      timeout,
    )

    it(
      "makes a directory with its parents as the sandbox's user, and refuses one outside the writable directories",
      async () => {
        const sandbox = sandboxes.sandbox
        const dir = `${sandbox.rootDir}/file-api-mkdir/a/b`
        expect(await sandbox.makeDirectory(dir)).toBe(true)
        expect(await sandbox.makeDirectory(dir)).toBe(false)
        const owners = await sandbox.exec('sh', ['-c', `stat -c %u ${dir}; id -u`])
        const [owner, user] = owners.stdout.trim().split('\n')
        expect(owner).toBe(user)
        for (const path of ['/etc/cordon-mkdir', '/etc', `${sandbox.rootDir}/../../cordon-mkdir`]) {
          const error = await refusal(sandbox.makeDirectory(path))
          expect(SandboxPathError.isInstance(error), path).toBe(true)
        }
      },
      timeout,
    )

    it(
      'removes what a command made; refuses outside the writable directories and the mount root, as writeFile does',
      async () => {
        const sandbox = sandboxes.sandbox
        const dir = await caseDirectory(sandbox, 'remove')
        await sandbox.exec('sh', [
          '-c',
          `mkdir -p ${dir}/tree/sub && touch ${dir}/file ${dir}/tree/sub/x && ln -s /etc ${dir}/etc-link`,
        ])
        await sandbox.removeFile(`${dir}/file`)
        const notEmpty = await refusal(sandbox.removeFile(`${dir}/tree`))
        expect(SandboxOperationError.isInstance(notEmpty)).toBe(true)
        await sandbox.removeFile(`${dir}/tree`, { recursive: true })
        // The link goes, never what it leads to.
        await sandbox.removeFile(`${dir}/etc-link`)
        expect((await sandbox.exec('ls', ['-A', dir])).stdout).toBe('')
        expect((await sandbox.exec('test', ['-f', '/etc/passwd'])).exitCode).toBe(0)

        for (const path of ['/etc/passwd', '/etc', `${sandbox.rootDir}/../etc`]) {
          const removed = await refusal(sandbox.removeFile(path, { recursive: true }))
          expect(SandboxPathError.isInstance(removed), path).toBe(true)
          const written = await refusal(sandbox.writeFile(path, 'x'))
          expect(SandboxPathError.isInstance(written), path).toBe(true)
        }
        const root = await refusal(sandbox.removeFile(sandbox.rootDir, { recursive: true }))
        expect(SandboxPathError.isInstance(root)).toBe(true)
        expect((await sandbox.exec('test', ['-d', sandbox.rootDir])).exitCode).toBe(0)
      },
      timeout,
    )

    it(
      'renames inside the writable directories and refuses a move out of them',
      async () => {
        const sandbox = sandboxes.sandbox
        const dir = await caseDirectory(sandbox, 'rename')
        await sandbox.writeFile(`${dir}/a.txt`, 'moving')
        await sandbox.renameFile(`${dir}/a.txt`, `${dir}/sub/b.txt`)
        expect((await sandbox.exec('cat', [`${dir}/sub/b.txt`])).stdout).toBe('moving')
        for (const to of ['/etc/stolen.txt', '/stolen.txt', `${sandbox.rootDir}/../stolen.txt`]) {
          const error = await refusal(sandbox.renameFile(`${dir}/sub/b.txt`, to))
          expect(SandboxPathError.isInstance(error), to).toBe(true)
        }
        expect((await sandbox.exec('cat', [`${dir}/sub/b.txt`])).stdout).toBe('moving')
        const inward = await refusal(sandbox.renameFile('/etc/hostname', `${dir}/hostname`))
        expect(SandboxPathError.isInstance(inward)).toBe(true)
        const root = await refusal(sandbox.renameFile(sandbox.rootDir, `${dir}/root`))
        expect(SandboxPathError.isInstance(root)).toBe(true)
      },
      timeout,
    )

    it(
      "a watch sees a command's touch, move and removal, a writeFile, and ends with its signal",
      async () => {
        const sandbox = sandboxes.sandbox
        const dir = await caseDirectory(sandbox, 'watch')
        const controller = new AbortController()
        const watch = await sandbox.watchDirectory(dir, { signal: controller.signal })
        const changes: SandboxFileChange[] = []
        const collected = (async () => {
          for await (const change of watch) {
            changes.push(change)
            if (change.type === 'removed') controller.abort()
          }
        })()
        await sandbox.exec('touch', [`${dir}/touched`])
        await new Promise((resolve) => setTimeout(resolve, 150))
        await sandbox.writeFile(`${dir}/written`, 'through the API')
        await new Promise((resolve) => setTimeout(resolve, 150))
        await sandbox.exec('mv', [`${dir}/touched`, `${dir}/moved`])
        await new Promise((resolve) => setTimeout(resolve, 150))
        await sandbox.exec('rm', [`${dir}/moved`])
        await collected
        expect(changes).toEqual([
          { type: 'created', path: `${dir}/touched`, isDirectory: false },
          { type: 'created', path: `${dir}/written`, isDirectory: false },
          { type: 'renamed', path: `${dir}/moved`, oldPath: `${dir}/touched`, isDirectory: false },
          { type: 'removed', path: `${dir}/moved`, isDirectory: false },
        ])
        const outside = await refusal(sandbox.watchDirectory('/etc'))
        expect(SandboxPathError.isInstance(outside)).toBe(true)
      },
      timeout,
    )

    it(
      'externalWatch declared: a watch of outside changes is accepted; declared false: refused naming watchDirectory.external',
      async () => {
        const sandbox = sandboxes.sandbox
        const watching = sandbox.watchDirectory(sandbox.rootDir, { external: true })
        if (sandboxes.declared.externalWatch) {
          await (await watching).close()
          return
        }
        const error = await watching.then(
          async (watch) => {
            await watch.close()
            return undefined
          },
          (caught: unknown) => caught,
        )
        expect(SandboxControlRefusedError.isInstance(error), 'the watch is refused').toBe(true)
        expect(error).toMatchObject({
          control: 'watchDirectory.external',
          backend: sandboxes.provider.backend,
        })
      },
      timeout,
    )
  })
}
