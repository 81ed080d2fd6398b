import { mkdtempSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { describe, expect, it } from 'vitest'
import { cordon } from './run-cli.js'

const COMMANDS = ['run', 'shell', 'demo', 'gc', 'prepare', 'build'] as const

describe('cordon help', () => {
  it.each(COMMANDS)(
    'cordon %s --help and -h print its usage on stdout and exit 0',
    async (name) => {
      for (const flag of ['--help', '-h']) {
        const result = await cordon([name, flag])
        expect(result, flag).toMatchObject({ code: 0, stderr: '' })
        expect(result.stdout).toMatch(new RegExp(`^usage: cordon ${name} `))
      }
      expect((await cordon(['help', name])).stdout).toMatch(new RegExp(`^usage: cordon ${name} `))
    },
  )

  it('prints help without escape or carriage-return bytes when stdout is not a terminal', async () => {
    for (const args of [['--help'], ['run', '--help']]) {
      const result = await cordon(args)
      expect(result.code).toBe(0)
      // The help mentions those characters by their escapes only.
      expect(result.stdout).toContain('shown as escapes (\\x1b, \\r)')
      const controls = [...result.stdout].filter((char) => char < ' ' && char !== '\n')
      expect(controls).toEqual([])
    }
  })
})

describe('cordon usage errors exit 64 and name what to fix', () => {
  it.each([
    [['run', '--bogus', '--', 'true'], "cordon run: Unknown option '--bogus'"],
    [['gc', '--bogus'], "cordon gc: Unknown option '--bogus'"],
    [
      ['gc', '--volume-retention', '3 weeks'],
      'cordon gc: --volume-retention takes a number and a unit, ms, s, m, h or d (e.g. 30d), not "3 weeks"',
    ],
    [
      ['gc', '--snapshot-retention', '0s'],
      'cordon gc: --snapshot-retention must be longer than 0, got "0s"',
    ],
    [['gc', '--label', 'team'], 'cordon gc: --label takes <key>=<value>, not "team"'],
    [
      ['gc', '--label', 'team=a', '--microvm', 'microvm.json'],
      'cordon gc: --label scopes only the Docker sweep: it cannot be combined with --aci or --microvm',
    ],
    [
      ['prepare', 'extra'],
      'cordon prepare: cordon prepare takes no arguments, only flags (got "extra")',
    ],
    [
      ['demo', '--runtime', 'lxc'],
      'cordon demo: --runtime is one of docker, runc, runsc (got "lxc")',
    ],
    [['run', '--timeout'], "cordon run: Option '--timeout <value>' argument missing"],
    [['run'], 'cordon run: no command to run: cordon run [options] -- COMMAND [ARGS...]'],
    [
      ['run', 'echo', 'hi'],
      "cordon run: the sandbox's command goes after --: cordon run [options] -- echo hi",
    ],
    [
      ['shell', 'ls', '/'],
      "cordon shell: the sandbox's command goes after --: cordon shell [options] -- ls /",
    ],
    [
      ['run', '--memory', 'abc', '--', 'true'],
      'cordon run: --memory takes a whole number of MiB, at least 1 (got "abc")',
    ],
    [
      ['run', '--pids', '0', '--', 'true'],
      'cordon run: --pids takes a whole number of processes, at least 1 (got "0")',
    ],
    [
      ['run', '--timeout', '1.5', '--', 'true'],
      'cordon run: --timeout takes a whole number of milliseconds, at least 1 (got "1.5")',
    ],
    [
      ['run', '--env', 'FOO', '--', 'true'],
      'cordon run: --env takes KEY=VALUE (got "FOO"); to pass on your own value, write --env FOO="$FOO"',
    ],
    [
      ['run', '--env', '1X=y', '--', 'true'],
      'cordon run: --env: environment variable names are letters, digits and "_"',
    ],
    [
      ['run', '--runtime', 'lxc', '--', 'true'],
      'cordon run: --runtime is one of docker, runc, runsc (got "lxc")',
    ],
    [
      ['run', '--memory', '1', '--', 'true'],
      "cordon run: --memory 1: 1 MiB is below the minimum of 32 MiB; the sandbox's memory limit is memoryLimitMb plus 48 MiB for cordon's agent",
    ],
    [
      ['shell', '--memory', '31'],
      "cordon shell: --memory 31: 31 MiB is below the minimum of 32 MiB; the sandbox's memory limit is memoryLimitMb plus 48 MiB for cordon's agent",
    ],
    [['build', '--bogus'], "cordon build: Unknown option '--bogus'"],
    [['build', '-t'], "cordon build: Option '-t, --tag <value>' argument missing"],
    [['build', '.'], 'cordon build: --tag is missing: the name to give the image'],
    [
      ['build', '--tag', 'app:1'],
      'cordon build: the directory to build (DIR, holding the Dockerfile) is missing',
    ],
    [
      ['build', '--tag', 'app:1', 'a', 'b'],
      'cordon build: takes one directory to build, got 2: a b',
    ],
    [
      ['build', '--tag', 'app:1', '--build-arg', 'FOO', '.'],
      'cordon build: --build-arg takes KEY=VALUE (got "FOO"); to pass on your own value, write --build-arg FOO="$FOO"',
    ],
    [
      ['build', '--tag', 'app:1', '--build-arg', '=1', '.'],
      'cordon build: --build-arg takes KEY=VALUE (got "=1"); to pass on your own value, write --build-arg KEY="$KEY"',
    ],
    [
      ['build', '--tag', 'Tools:1', '/'],
      'cordon build: --tag: "Tools:1" is not an image reference the engine accepts ([host[:port]/]name[:tag][@digest], the name in lowercase letters, digits and . _ - separators): the repository name must be lowercase',
    ],
    [
      ['build', '--tag', 'tools:1', '/nonexistent-cordon-context'],
      'cordon build: DIR: /nonexistent-cordon-context is not a directory',
    ],
    [
      ['run', '--image', 'bad image!', '--', 'true'],
      'cordon run: --image: "bad image!" is not an image reference the engine accepts ([host[:port]/]name[:tag][@digest], the name in lowercase letters, digits and . _ - separators)',
    ],
    [
      ['run', '--image', 'a', '--image', 'b', '--', 'true'],
      'cordon run: --image takes one value, given 2 times ("a", "b"); give it once',
    ],
    [
      ['shell', '--runtime=runc', '--runtime', 'runsc'],
      'cordon shell: --runtime takes one value, given 2 times ("runc", "runsc"); give it once',
    ],
    [
      ['build', '-t', 'a:1', '--tag', 'b:1', '.'],
      'cordon build: --tag takes one value, given 2 times ("a:1", "b:1"); give it once',
    ],
    [
      ['run', '--outputs', '', '--', 'true'],
      'cordon run: --outputs: name a host directory (got "")',
    ],
    [
      ['run', '--ready-timeout', '30', '--', 'true'],
      'cordon run: --ready-timeout takes a number and a unit, ms, s, m, h or d (e.g. 90s), not "30"',
    ],
    [
      ['shell', '--ready-timeout', '0s'],
      'cordon shell: --ready-timeout must be longer than 0, got "0s"',
    ],
    [
      ['run', '--ready-timeout', '30d', '--', 'true'],
      'cordon run: --ready-timeout: Too big: expected number to be <=2147483647',
    ],
  ])('cordon %j', async (args, message) => {
    const result = await cordon([...args])
    expect(result).toMatchObject({
      code: 64,
      stdout: '',
      stderr: `${message}\n(cordon ${args[0]} --help shows its usage)\n`,
    })
  })

  it('names --outputs when it is a file, not a directory, before any sandbox is made', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'cordon-cli-outputs-'))
    try {
      const file = join(dir, 'afile')
      writeFileSync(file, 'not a directory\n')
      const result = await cordon(['run', '--outputs', file, '--', 'true'], {
        DOCKER_HOST: 'unix:///nonexistent/cordon-engine.sock',
      })
      expect(result).toEqual({
        code: 64,
        stdout: '',
        stderr: `cordon run: --outputs: ${file} is not a directory; name a directory to hold the outputs\n(cordon run --help shows its usage)\n`,
      })
    } finally {
      rmSync(dir, { recursive: true, force: true })
    }
  })

  it('cordon help with a command it does not know is a usage error naming it', async () => {
    const result = await cordon(['help', 'bogus'])
    expect(result).toEqual({
      code: 64,
      stdout: '',
      stderr:
        'cordon: unknown command "bogus"; the commands are run, shell, demo, gc, prepare, build (cordon --help)\n',
    })
  })

  it('an unknown command and a missing one exit 64 with the usage on stderr', async () => {
    const unknown = await cordon(['frobnicate'])
    expect(unknown).toMatchObject({ code: 64, stdout: '' })
    expect(unknown.stderr).toBe(
      'cordon: unknown command "frobnicate"; the commands are run, shell, demo, gc, prepare, build (cordon --help)\n',
    )
    const none = await cordon([])
    expect(none).toMatchObject({ code: 64, stdout: '' })
    expect(none.stderr).toMatch(/^usage: cordon <command>/)
  })
})
