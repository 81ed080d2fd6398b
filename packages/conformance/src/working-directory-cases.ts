import { SandboxConfigValidationError, SandboxPathError } from '@cordon/core'
import { describe, expect, it } from 'vitest'
import type { SandboxesUnderTest } from './shared-sandbox.js'
import type { SandboxConformanceOptions } from './suite-options.js'

/** Where a missing directory may not be made: outside every writable directory. */
const OUTSIDE = '/cordon-conformance-missing/deeper'

/**
 * The working directory of commands, as the reference defined it: a relative
 * `cwd` resolves against `rootDir`, a missing one is made before the command
 * (as the sandbox's user, only inside a writable directory), and the
 * sandbox's `workingDirectory` is made when the sandbox is.
 */
export function workingDirectoryCases(
  options: SandboxConformanceOptions,
  sandboxes: SandboxesUnderTest,
): void {
  const timeout = options.timeoutMs ?? 60_000

  describe('working directory', () => {
    it(
      'resolves a relative cwd against rootDir and makes a missing one as the sandbox user (exec and start)',
      async () => {
        await sandboxes.withFresh({}, async (sandbox) => {
          // The probe file is the command's own: its owner is the sandbox's user.
          const made = await sandbox.exec(
            'sh',
            ['-c', 'pwd; printf x > probe; stat -c %u . probe'],
            { cwd: 'build/deep' },
          )
          expect(made).toMatchObject({ exitCode: 0, stderr: '' })
          const [where, directoryOwner, fileOwner] = made.stdout.trim().split('\n')
          expect(where).toBe(`${sandbox.rootDir}/build/deep`)
          expect(directoryOwner).toBe(fileOwner)

          const again = await sandbox.exec('pwd', [], { cwd: './build/../build/deep' })
          expect(again.stdout).toBe(`${sandbox.rootDir}/build/deep\n`)
          expect((await sandbox.exec('pwd', [], { cwd: '.' })).stdout).toBe(`${sandbox.rootDir}\n`)

          const started = await sandbox.start('pwd', [], { cwd: 'from-start', openStdin: false })
          expect(await started.wait()).toMatchObject({
            exitCode: 0,
            stdout: `${sandbox.rootDir}/from-start\n`,
          })
        })
      },
      timeout,
    )

    it(
      'refuses with SandboxPathError a missing cwd outside the writable directories, or one that is a file',
      async () => {
        const outside = await sandboxes.sandbox
          .exec('pwd', [], { cwd: OUTSIDE })
          .catch((caught: unknown) => caught)
        expect(SandboxPathError.isInstance(outside)).toBe(true)
        expect((outside as SandboxPathError).path).toBe(OUTSIDE)
        const viaDots = await sandboxes.sandbox
          .exec('pwd', [], { cwd: '../../../../cordon-conformance-missing' })
          .catch((caught: unknown) => caught)
        expect(SandboxPathError.isInstance(viaDots)).toBe(true)
        await sandboxes.sandbox.writeFile('not-a-directory', 'x')
        const file = await sandboxes.sandbox
          .exec('pwd', [], { cwd: 'not-a-directory' })
          .catch((caught: unknown) => caught)
        expect(SandboxPathError.isInstance(file)).toBe(true)
        expect((file as SandboxPathError).path).toBe(`${sandboxes.sandbox.rootDir}/not-a-directory`)
        // Nothing was made outside, and the sandbox goes on.
        expect(
          (await sandboxes.sandbox.exec('ls', ['/cordon-conformance-missing'])).exitCode,
        ).not.toBe(0)
      },
      timeout,
    )

    it(
      'makes create({ workingDirectory }) before create resolves, or refuses the create naming the field',
      async () => {
        await sandboxes.withFresh({ workingDirectory: 'work/area' }, async (sandbox) => {
          const result = await sandbox.exec('sh', [
            '-c',
            'pwd; printf x > probe; stat -c %u . probe',
          ])
          expect(result.exitCode).toBe(0)
          const [where, directoryOwner, fileOwner] = result.stdout.trim().split('\n')
          expect(where).toBe(`${sandbox.rootDir}/work/area`)
          expect(directoryOwner).toBe(fileOwner)
          // An explicit cwd still wins.
          expect((await sandbox.exec('pwd', [], { cwd: sandbox.rootDir })).stdout).toBe(
            `${sandbox.rootDir}\n`,
          )
        })
        const refused = await sandboxes.provider
          .create({ workingDirectory: OUTSIDE })
          .catch((caught: unknown) => caught)
        expect(SandboxConfigValidationError.isInstance(refused)).toBe(true)
        expect((refused as SandboxConfigValidationError).issues).toEqual([
          { path: 'workingDirectory', message: expect.stringContaining(OUTSIDE) },
        ])
      },
      timeout,
    )
  })
}
