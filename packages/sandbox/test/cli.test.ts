import { execFileSync } from 'node:child_process'
import { createHash, randomBytes } from 'node:crypto'
import {
  chmodSync,
  existsSync,
  mkdirSync,
  mkdtempSync,
  readFileSync,
  rmSync,
  writeFileSync,
} from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { fileURLToPath } from 'node:url'
import { beforeAll, describe, expect, it } from 'vitest'
import { pushTestImage, startLocalRegistry } from '../../../tooling/engine/test-registry.mjs'
import { cordon } from './run-cli.js'

describe('the cordon command', () => {
  // The agent runtime volume is filled once per engine and content, by the
  // first create that lacks it: seconds of copying, more on a loaded machine.
  // Filled here, so that each case below times what it tests, not that.
  beforeAll(async () => {
    const prepared = await cordon(['prepare'])
    if (prepared.code !== 0) throw new Error(`cordon prepare failed: ${prepared.stderr}`)
  }, 180_000)

  it('runs a command in a sandbox, streams its output and passes its exit code through', async () => {
    const ok = await cordon(['run', '--', 'sh', '-c', 'echo out; echo err >&2; id -u'])
    expect(ok).toMatchObject({ code: 0, stderr: 'err\n' })
    // The command runs as the sandbox's own unprivileged uid.
    const [out, uid] = ok.stdout.trim().split('\n')
    expect(out).toBe('out')
    expect(Number(uid)).toBeGreaterThanOrEqual(2 ** 30)
    const failing = await cordon(['run', '--env', 'CODE=7', '--', 'sh', '-c', 'exit $CODE'])
    expect(failing.code).toBe(7)
  })

  it("shows a sandbox's terminal control sequences as escapes on a terminal, raw otherwise", async () => {
    const { PassThrough } = await import('node:stream')
    const { runCommand } = await import('../dist/cli/run-command.js')
    // Retitles the window, clears the screen and overwrites the line, if printed raw.
    const hostile = ['--', 'printf', '\\033]0;pwned\\007\\033[2Jok\\rno\\n']
    const run = async (terminal: boolean, flags: string[] = []) => {
      let out = ''
      const stdout = Object.assign(new PassThrough(), { isTTY: terminal })
      stdout.on('data', (chunk: Buffer) => {
        out += chunk.toString()
      })
      const stderr = Object.assign(new PassThrough(), { isTTY: terminal }).resume()
      const stdin = Object.assign(new PassThrough(), { isTTY: true })
      const code = await runCommand([...flags, ...hostile], { stdin, stdout, stderr })
      expect(code).toBe(0)
      return out
    }
    expect(await run(true)).toBe('\\x1b]0;pwned\\x07\\x1b[2Jok\\rno\n')
    expect(await run(false)).toBe('\x1b]0;pwned\x07\x1b[2Jok\rno\n')
    expect(await run(true, ['--raw'])).toBe('\x1b]0;pwned\x07\x1b[2Jok\rno\n')
  })

  it('cordon shell gives an interactive terminal of the local size, resized with it, and passes the exit code', async () => {
    const { PassThrough } = await import('node:stream')
    const { shellCommand } = await import('../dist/cli/shell-command.js')
    // A terminal on the local side (without raw mode, which a test stream has not).
    const stdin = Object.assign(new PassThrough(), { isTTY: true })
    const stdout = Object.assign(new PassThrough(), { columns: 100, rows: 30 })
    let shown = ''
    stdout.on('data', (chunk: Buffer) => {
      shown += chunk.toString()
    })
    let resized: () => void = () => {}
    const until = async (pattern: RegExp) => {
      for (let waited = 0; !pattern.test(shown); waited += 50) {
        if (waited > 20_000) throw new Error(`no ${pattern} in ${JSON.stringify(shown)}`)
        await new Promise((resolve) => setTimeout(resolve, 50))
      }
    }
    const running = shellCommand(['--', 'sh', '-i'], {
      stdin,
      stdout,
      stderr: new PassThrough().resume(),
      onResize: (listener) => {
        resized = listener
        return () => {}
      },
    })
    await until(/outputs \$ /)
    stdin.write('stty size\r')
    await until(/30 100/)
    Object.assign(stdout, { columns: 120, rows: 40 })
    resized()
    // The resize is an engine call of its own, not ordered with what is typed:
    // ask again until the new size shows (on a loaded engine it can take a while).
    for (let asked = 0; asked < 80 && !/40 120/.test(shown); asked++) {
      stdin.write('stty size\r')
      await new Promise((resolve) => setTimeout(resolve, 250))
    }
    expect(shown).toContain('40 120')
    stdin.write('exit 4\r')
    expect(await running).toBe(4)
  })

  it('takes --outputs relative to where it runs, and --runtime runc', async () => {
    const cwd = mkdtempSync(join(tmpdir(), 'cordon-cli-outputs-'))
    try {
      mkdirSync(join(cwd, 'out'), { mode: 0o1777 })
      chmodSync(join(cwd, 'out'), 0o1777)
      const result = await cordon(
        [
          'run',
          '--runtime',
          'runc',
          '--outputs',
          'out',
          '--',
          'sh',
          '-c',
          'echo kept > result.txt',
        ],
        {},
        undefined,
        cwd,
      )
      expect(result).toMatchObject({ code: 0, stderr: '' })
      expect(readFileSync(join(cwd, 'out', 'result.txt'), 'utf8')).toBe('kept\n')
    } finally {
      rmSync(cwd, { recursive: true, force: true })
    }
  })

  it('names --outputs when its directory does not exist, and makes none', async () => {
    const cwd = mkdtempSync(join(tmpdir(), 'cordon-cli-outputs-'))
    try {
      const result = await cordon(['run', '--outputs', 'absent', '--', 'true'], {}, undefined, cwd)
      expect(result).toMatchObject({
        code: 64,
        stderr: `cordon run: --outputs: host directory ${join(cwd, 'absent')} does not exist on the engine's host; make it first\n(cordon run --help shows its usage)\n`,
      })
      expect(existsSync(join(cwd, 'absent'))).toBe(false)
    } finally {
      rmSync(cwd, { recursive: true, force: true })
    }
  })

  it('reports a timeout and kills the command', async () => {
    const result = await cordon(['run', '--timeout', '500', '--', 'sleep', '30'])
    expect(result.stderr).toContain('timed out after 500 ms')
    expect(result.code).toBe(137)
  })

  it('builds an image with its output on stderr, pulls a missing one with progress on stderr, and names one it cannot pull', async () => {
    const registry = await startLocalRegistry()
    const context = mkdtempSync(join(tmpdir(), 'cordon-cli-build-'))
    const built = `cordon-test-cli-build-${process.pid}:1`
    const pushed = `${registry.host}/cordon-test/cli:1`
    try {
      const payload = randomBytes(2 * 1024 * 1024)
      writeFileSync(join(context, 'payload'), payload)
      writeFileSync(
        join(context, 'Dockerfile'),
        'FROM cordon-test/busybox:latest\nCOPY payload /payload\nUSER 0\nRUN sha256sum /payload > /payload.sha256\n',
      )
      const build = await cordon(['build', '--tag', built, context])
      expect(build.code, build.stderr).toBe(0)
      expect(build.stderr).toMatch(/^Step 4\/\d+ : RUN sha256sum/m)
      expect(build.stdout).toMatch(new RegExp(`built ${built} \\(sha256:[0-9a-f]{64}\\)`))
      await pushTestImage(built, pushed)
      execFileSync('docker', ['image', 'rm', built])

      const run = await cordon(['run', '--image', pushed, '--', 'cat', '/payload.sha256'])
      expect(run.code, run.stderr).toBe(0)
      expect(run.stdout).toContain(createHash('sha256').update(payload).digest('hex'))
      expect(run.stderr).toContain(`cordon: pulling ${pushed}\n`)
      expect(run.stderr).toMatch(
        new RegExp(`cordon: pulled ${pushed} \\(3/3 layers, [\\d.]+/[\\d.]+ MB\\) in [\\d.]+ s`),
      )

      const absent = await cordon([
        'run',
        '--image',
        `${registry.host}/cordon-test/absent:1`,
        '--',
        'true',
      ])
      expect(absent.code).toBe(125)
      expect(absent.stderr).toContain(
        `Could not pull image "${registry.host}/cordon-test/absent:1"`,
      )
      expect(absent.stderr).toContain('[IMAGE_PULL_FAILED]')
      // The engine set-up script is no answer to an image the registry lacks.
      expect(absent.stderr).not.toContain('setup.sh')
    } finally {
      for (const image of [built, pushed]) {
        try {
          execFileSync('docker', ['image', 'rm', image], { stdio: 'ignore' })
        } catch {}
      }
      await registry.stop()
      rmSync(context, { recursive: true, force: true })
    }
  }, 120_000)

  it("pulls a private image with the Docker CLI's stored login: an auths entry, a credential helper, and names a wrong one", async () => {
    const password = `pw-${randomBytes(6).toString('hex')}`
    const registry = await startLocalRegistry({ users: { tester: password } })
    const home = mkdtempSync(join(tmpdir(), 'cordon-cli-docker-config-'))
    const images = [1, 2, 3].map((tag) => `${registry.host}/cordon-test/private:${tag}`)
    const login = { username: 'tester', password, serveraddress: registry.host }
    const pull = (image: string, env: Record<string, string>) =>
      cordon(['run', '--image', image, '--', 'cat', '/etc/private-mark'], env)
    try {
      const context = join(home, 'context')
      mkdirSync(context)
      writeFileSync(
        join(context, 'Dockerfile'),
        'FROM cordon-test/busybox:latest\nUSER 0\nRUN echo private > /etc/private-mark\n',
      )
      const source = `cordon-test-cli-private-${process.pid}:1`
      expect((await cordon(['build', '--tag', source, context])).code).toBe(0)
      for (const image of images) await pushTestImage(source, image, login)
      execFileSync('docker', ['image', 'rm', source])

      // `docker login` without a store: the config's auths entry.
      const plain = join(home, 'plain')
      mkdirSync(plain)
      const auth = Buffer.from(`tester:${password}`).toString('base64')
      writeFileSync(
        join(plain, 'config.json'),
        JSON.stringify({ auths: { [registry.host]: { auth } } }),
      )
      const first = await pull(images[0]!, { DOCKER_CONFIG: plain })
      expect(first.code, first.stderr).toBe(0)
      expect(first.stdout).toBe('private\n')
      expect(first.stderr).toContain(`cordon: pulled ${images[0]}`)

      // A credential store: the helper is asked for the registry, as the Docker CLI asks it.
      const stored = join(home, 'stored')
      const bin = join(home, 'bin')
      mkdirSync(stored)
      mkdirSync(bin)
      writeFileSync(join(stored, 'config.json'), JSON.stringify({ credsStore: 'cordon-test' }))
      writeFileSync(
        join(bin, 'docker-credential-cordon-test'),
        `#!/bin/sh\nread server\n[ "$1" = get ] && [ "$server" = "${registry.host}" ] || { echo "credentials not found in native keychain"; exit 1; }\necho '{"ServerURL":"${registry.host}","Username":"tester","Secret":"${password}"}'\n`,
        { mode: 0o755 },
      )
      const path = `${bin}:${process.env.PATH}`
      const second = await pull(images[1]!, { DOCKER_CONFIG: stored, PATH: path })
      expect(second.code, second.stderr).toBe(0)
      expect(second.stdout).toBe('private\n')

      // A wrong password is the registry's refusal, named; nothing stored is a pull without one.
      const wrong = join(home, 'wrong')
      mkdirSync(wrong)
      writeFileSync(
        join(wrong, 'config.json'),
        JSON.stringify({ auths: { [registry.host]: { username: 'tester', password: 'nope' } } }),
      )
      for (const env of [{ DOCKER_CONFIG: wrong }, { DOCKER_CONFIG: join(home, 'none') }]) {
        const refused = await pull(images[2]!, env)
        expect(refused.code).toBe(125)
        expect(refused.stderr).toContain(`Could not pull image "${images[2]}"`)
        expect(refused.stderr).toContain('[IMAGE_PULL_FAILED]')
        expect(refused.stderr).not.toContain(password)
      }

      // A login cordon cannot use is refused naming the config and the registry.
      const token = join(home, 'token')
      mkdirSync(token)
      writeFileSync(
        join(token, 'config.json'),
        JSON.stringify({ auths: { [registry.host]: { identitytoken: 'opaque' } } }),
      )
      const unusable = await pull(images[2]!, { DOCKER_CONFIG: token })
      expect(unusable.code).toBe(125)
      expect(unusable.stderr).toContain(`Invalid Docker CLI config ${join(token, 'config.json')}`)
      expect(unusable.stderr).toContain(`${registry.host}: holds an identity token`)
    } finally {
      for (const image of images) {
        try {
          execFileSync('docker', ['image', 'rm', image], { stdio: 'ignore' })
        } catch {}
      }
      await registry.stop()
      rmSync(home, { recursive: true, force: true })
    }
  }, 180_000)

  it('explains an unreachable engine and exits 125', async () => {
    const result = await cordon(['run', '--', 'true'], {
      DOCKER_HOST: 'unix:///nonexistent/docker.sock',
    })
    expect(result.code).toBe(125)
    expect(result.stderr).toContain('unreachable')
    expect(result.stderr).toContain('tooling/engine/setup.sh')
  })

  it('names DOCKER_HOST and the engine when DOCKER_HOST leads nowhere, in run, gc, prepare and demo', async () => {
    for (const [dockerHost, reason] of [
      ['bogus', /\((ENOTFOUND|EAI_AGAIN): its host name does not resolve\)/],
      ['unix:///nonexistent/docker.sock', /\(ENOENT\)/],
    ] as const) {
      for (const args of [['run', '--', 'true'], ['gc'], ['prepare'], ['demo']]) {
        const result = await cordon(args, { DOCKER_HOST: dockerHost })
        expect(result.code, `${args[0]} ${dockerHost}`).toBe(125)
        const [first] = result.stderr.split('\n')
        expect(first).toContain(
          `cordon: The Docker Engine at DOCKER_HOST=${dockerHost} is unreachable`,
        )
        expect(first).toMatch(reason)
      }
    }
    // Eight runs of the command: a bound on a hang, not a measure of speed.
  }, 120_000)

  it('runs the demo: a command, a file round trip, refused and gateway egress decisions, destroy', async () => {
    const result = await cordon(['demo'])
    expect(result.code).toBe(0)
    expect(result.stdout).toMatch(/uid=\d{10}/)
    expect(result.stdout).toContain('HELLO FROM THE HOST')
    expect(result.stdout).toContain('egress decision: DENY (policy deny-all')
    expect(result.stdout).toContain('hello from the demo upstream: GET /')
    expect(result.stdout).toMatch(/egress decision: ALLOW demo\.upstream:\d+ \(allowed\)/)
    expect(result.stdout).toContain('egress decision: DENY example.com:80 (host-not-allowed)')
    expect(result.stdout).toContain('destroyed the sandbox')
  }, 60_000)

  it('prepare fills the agent runtime volume ahead of time, and again finds it there', async () => {
    for (let run = 0; run < 2; run++) {
      const result = await cordon(['prepare'])
      expect(result.code).toBe(0)
      const volume = /volume (cordon-runtime-\w+)/.exec(result.stdout)?.[1]
      expect(volume).toBeDefined()
      // The volume is on the engine, with the agent in it.
      const listing = execFileSync('docker', [
        'run',
        '--rm',
        '--network',
        'none',
        '-v',
        `${volume}:/runtime:ro`,
        'cordon-test/busybox:latest',
        'ls',
        '/runtime',
      ]).toString()
      expect(listing).toContain('agent.cjs')
    }
  })

  it('gc --dry-run reports without removing', async () => {
    const result = await cordon(['gc', '--dry-run'])
    expect(result.code).toBe(0)
    expect(result.stdout).toMatch(/would remove \d+ containers/)
  })

  it('gc lists each named volume and keeps it, unless past --volume-retention', async () => {
    const { createSandboxProvider } = await import('../src/index.js')
    const provider = createSandboxProvider({
      backend: { tier: 'container', runtime: 'docker', image: 'cordon-test/busybox:latest' },
      layout: { outputs: { source: { type: 'ephemeral' } } },
    })
    const name = `cli-gc-${randomBytes(4).toString('hex')}`
    await provider.volumes.create({ name, sizeMb: 8 })
    try {
      const kept = await cordon(['gc', '--dry-run'])
      expect(kept.code).toBe(0)
      expect(kept.stdout).toMatch(
        new RegExp(
          `volume ${name} \\(8 MiB, last used \\d+ s ago\\): kept \\(no --volume-retention\\)`,
        ),
      )
      const past = await cordon(['gc', '--dry-run', '--volume-retention', '0s'])
      expect(past.stdout).toContain(`volume ${name} (8 MiB, last used`)
      expect(past.stdout).toMatch(new RegExp(`volume ${name} .*: would remove`))
      const within = await cordon(['gc', '--dry-run', '--volume-retention', '30d'])
      expect(within.stdout).toMatch(new RegExp(`volume ${name} .*: kept\n`))
      expect((await provider.volumes.list()).map((volume) => volume.name)).toContain(name)
    } finally {
      await provider.volumes.remove(name)
      await provider.close()
    }
  }, 120_000)

  it('gc --label removes only what carries the label, and refuses a key the engine cannot filter by', async () => {
    const { createSandboxProvider } = await import('../src/index.js')
    const scope = `team-${randomBytes(4).toString('hex')}`
    const host = (labels: Record<string, string>) =>
      createSandboxProvider({
        backend: {
          tier: 'container',
          runtime: 'docker',
          image: 'cordon-test/busybox:latest',
          labels,
        },
        layout: { outputs: { source: { type: 'ephemeral' } } },
      })
    const mine = host({ 'cli-test.scope': scope })
    const theirs = host({ 'cli-test.scope': `not-${scope}` })
    const myVolume = `cli-gc-mine-${randomBytes(4).toString('hex')}`
    const theirVolume = `cli-gc-theirs-${randomBytes(4).toString('hex')}`
    await mine.volumes.create({ name: myVolume, sizeMb: 8 })
    await theirs.volumes.create({ name: theirVolume, sizeMb: 8 })
    try {
      const result = await cordon([
        'gc',
        '--label',
        `cli-test.scope=${scope}`,
        '--volume-retention',
        '0s',
      ])
      expect(result.code, result.stderr).toBe(0)
      expect(result.stdout).toContain(`[labels cli-test.scope=${scope}]): removed`)
      // What was kept, by the reason it was kept: none of this scope's snapshots.
      expect(result.stdout).toContain(', 0 snapshots within their retention, ')
      expect(result.stdout).toMatch(new RegExp(`volume ${myVolume} .*: removed\n`))
      expect(result.stdout).not.toContain(theirVolume)
      expect((await mine.volumes.list()).map((volume) => volume.name)).not.toContain(myVolume)
      expect((await theirs.volumes.list()).map((volume) => volume.name)).toContain(theirVolume)

      const refused = await cordon(['gc', '--label', 'has space=x', '--volume-retention', '0s'])
      expect(refused.code).toBe(125)
      expect(refused.stderr).toContain('labels.has space')
      expect((await theirs.volumes.list()).map((volume) => volume.name)).toContain(theirVolume)
    } finally {
      await mine.volumes.remove(myVolume).catch(() => {})
      await theirs.volumes.remove(theirVolume)
      await Promise.all([mine.close(), theirs.close()])
    }
  }, 120_000)

  it('gc keeps what an owner in another PID namespace made, and says why', async () => {
    // The owner labels of a host in a PID namespace of its own on this machine.
    const labels = JSON.parse(
      execFileSync(
        'unshare',
        [
          '--pid',
          '--fork',
          '--mount-proc',
          process.execPath,
          '--input-type=module',
          '-e',
          "import { ownerLabels } from '@cordon/core/backend'; process.stdout.write(JSON.stringify(ownerLabels('cli-test')))",
        ],
        { cwd: fileURLToPath(new URL('..', import.meta.url)), encoding: 'utf8' },
      ),
    ) as Record<string, string>
    const volume = `cordon-cli-test-other-namespace-${process.pid}`
    execFileSync('docker', [
      'volume',
      'create',
      ...Object.entries(labels).flatMap(([key, value]) => ['--label', `${key}=${value}`]),
      volume,
    ])
    try {
      for (const args of [['gc', '--dry-run'], ['gc']]) {
        const result = await cordon(args)
        expect(result.code, result.stderr).toBe(0)
        expect(result.stdout).toMatch(
          new RegExp(`kept \\d+ whose owner ran in another PID namespace [^\\n]*volume ${volume}`),
        )
        expect(result.stdout).toMatch(/cannot judge may still be running/)
      }
      // Kept by the real run too.
      execFileSync('docker', ['volume', 'inspect', volume])
    } finally {
      execFileSync('docker', ['volume', 'rm', '-f', volume])
    }
  })

  it('gc removes the credentials of detached sandboxes that have ended, and keeps a running one with its credential', async () => {
    const { createSandboxProvider } = await import('../dist/index.js')
    const store = mkdtempSync(join(tmpdir(), 'cordon-cli-credentials-'))
    const provider = createSandboxProvider({
      backend: {
        tier: 'container',
        image: 'cordon-test/busybox:latest',
        labels: { 'cordon-test.run': `cli-${process.pid}` },
      },
      layout: { outputs: { source: { type: 'ephemeral' } } },
      credentialStore: store,
    })
    const running = await provider.create({ detached: true, lifetimeMs: 120_000 })
    try {
      const ended = 'sbx_aaaaaaaaaaaaaaaaaaaaaaaaaa'
      const gone = 'sbx_bbbbbbbbbbbbbbbbbbbbbbbbbb'
      const stored = (id: string, endsAt: number) =>
        writeFileSync(
          join(store, `${id}.json`),
          JSON.stringify({ sandboxId: id, backend: provider.backend, endsAt, credential: 'x' }),
          { mode: 0o600 },
        )
      stored(ended, Date.now() - 1_000)
      stored(gone, Date.now() + 60_000)
      const dry = await cordon(['gc', '--dry-run', '--credential-store', store])
      expect(dry.code, dry.stderr).toBe(0)
      expect(dry.stdout).toMatch(/would remove 2 credentials of ended detached sandboxes/)
      const real = await cordon(['gc', '--credential-store', store])
      expect(real.code, real.stderr).toBe(0)
      expect(real.stdout).toMatch(/removed 2 credentials of ended detached sandboxes/)
      const { readdirSync } = await import('node:fs')
      expect(readdirSync(store)).toEqual([`${running.id}.json`])
      // The running detached sandbox, whose creator is this live process, was kept.
      expect((await running.exec('echo', ['kept'])).stdout).toBe('kept\n')
    } finally {
      await running.destroy()
      await provider.close()
      rmSync(store, { recursive: true, force: true })
    }
  })
})
