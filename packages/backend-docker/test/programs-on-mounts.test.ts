import { chmod, mkdtemp, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { type CordonSandbox, SandboxControlRefusedError } from '@cordon/core'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { testProvider } from './test-run.js'

/**
 * Puts two programs into `dir` the way an agent does (a compiled binary it
 * copied or downloaded, and a script it wrote and marked executable), runs
 * the binary directly and the script from a shell, and returns what each
 * did; the script also runs as an interpreter's input, mount flags or not.
 */
async function runProgramsFrom(sandbox: CordonSandbox, dir: string) {
  const binary = `${dir}/busybox`
  const script = `${dir}/hello.sh`
  const placed = await sandbox.exec('sh', [
    '-c',
    `cp /bin/busybox ${binary} && printf '#!/bin/sh\\necho script ran\\n' > ${script} && chmod +x ${script}`,
  ])
  expect(placed, placed.stderr).toMatchObject({ exitCode: 0 })
  const direct = await sandbox.exec(binary, ['echo', 'binary ran'])
  const fromShell = await sandbox.exec('sh', ['-c', `${script}; echo "status $?"`])
  // What noexec never stops: an interpreter reading the script.
  const interpreted = await sandbox.exec('sh', [script])
  expect(interpreted.stdout, dir).toBe('script ran\n')
  return {
    direct: { exitCode: direct.exitCode, stdout: direct.stdout },
    fromShell: fromShell.stdout,
  }
}

for (const runtime of ['docker', 'runsc'] as const) {
  describe(`programs the sandbox writes (${runtime})`, () => {
    let hostDir: string
    beforeAll(async () => {
      hostDir = await mkdtemp(join(tmpdir(), 'cordon-exec-'))
      await chmod(hostDir, 0o1777)
    })
    afterAll(async () => {
      await rm(hostDir, { recursive: true, force: true })
    })

    it('run from the workspace, an ephemeral mount and /tmp by default', async () => {
      const provider = testProvider(
        { runtime },
        {
          layout: {
            outputs: { source: { type: 'hostDir', hostPath: hostDir } },
            scratch: { source: { type: 'ephemeral' } },
          },
        },
      )
      try {
        const sandbox = await provider.create()
        for (const dir of ['/mnt/user-data/outputs', '/mnt/user-data/scratch', '/tmp']) {
          expect(await runProgramsFrom(sandbox, dir), dir).toEqual({
            direct: { exitCode: 0, stdout: 'binary ran\n' },
            fromShell: 'script ran\nstatus 0\n',
          })
        }
        // Shared memory is the engine's, and stays noexec.
        expect(await runProgramsFrom(sandbox, '/dev/shm')).toEqual({
          direct: { exitCode: 126, stdout: '' },
          fromShell: 'status 126\n',
        })
      } finally {
        await provider.close()
      }
    })

    it('fail with 126 from a mount marked noexec and from /tmp with tmpfsNoexec, and run elsewhere', async () => {
      const provider = testProvider(
        { runtime, tmpfsNoexec: true },
        {
          layout: {
            outputs: { source: { type: 'ephemeral' }, noexec: true },
            scratch: { source: { type: 'ephemeral' }, noexec: false },
          },
        },
      )
      try {
        const sandbox = await provider.create()
        for (const dir of ['/mnt/user-data/outputs', '/tmp']) {
          const ran = await runProgramsFrom(sandbox, dir)
          expect(ran.direct, dir).toEqual({ exitCode: 126, stdout: '' })
          expect(ran.fromShell, dir).toBe('status 126\n')
        }
        expect(await runProgramsFrom(sandbox, '/mnt/user-data/scratch')).toEqual({
          direct: { exitCode: 0, stdout: 'binary ran\n' },
          fromShell: 'script ran\nstatus 0\n',
        })
        // And sandbox.enforced says so, mount by mount (what the conformance suite checks it against).
        const said = Object.fromEntries(
          sandbox.enforced.mounts.map((mount) => [mount.path, mount.noexec]),
        )
        expect(said).toMatchObject({
          '/mnt/user-data/outputs': true,
          '/tmp': true,
          '/mnt/user-data/scratch': false,
        })
      } finally {
        await provider.close()
      }
    })
  })
}

describe('noexec the engine cannot give', () => {
  it.each([['hostDir', { type: 'hostDir', hostPath: tmpdir() }, 'layout.uploads.noexec']] as const)(
    'is refused on a %s source, naming the control',
    async (_, source, control) => {
      const provider = testProvider(
        {},
        {
          layout: {
            outputs: { source: { type: 'ephemeral' } },
            uploads: { source, noexec: true },
          },
        },
      )
      try {
        const error = await provider.create().catch((caught: unknown) => caught)
        expect(SandboxControlRefusedError.isInstance(error)).toBe(true)
        expect(error).toMatchObject({ control, backend: 'container:docker' })
      } finally {
        await provider.close()
      }
    },
  )

  it('on an inImage source the source itself is refused first, when the provider is made', () => {
    // The engine mounts nothing for inImage, so the Docker backends refuse the
    // source whatever its flags (README: inImage is refused here).
    expect(() =>
      testProvider(
        {},
        {
          layout: {
            outputs: { source: { type: 'ephemeral' } },
            uploads: { source: { type: 'inImage' }, noexec: true },
          },
        },
      ),
    ).toThrow(
      expect.objectContaining({ control: 'layout.uploads.source', backend: 'container:docker' }),
    )
  })
})
