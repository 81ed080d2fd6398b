import { execFileSync, spawn } from 'node:child_process'
import { chmod, chown, lstat, mkdtemp, readdir, readFile, realpath, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join, relative } from 'node:path'
import { fileURLToPath } from 'node:url'
import { testRunId } from '@cordon/test-support'
import { describe, expect, it } from 'vitest'
import { buildHostileTool, HOSTILE_TOOL } from './hostile-tool.js'
import { docker, testProvider } from './test-run.js'

/** Every entry under `root`, walked without following links. */
async function walk(root: string): Promise<string[]> {
  const found: string[] = []
  const pending = [root]
  while (pending.length > 0) {
    const directory = pending.pop()!
    for (const entry of await readdir(directory, { withFileTypes: true })) {
      const path = join(directory, entry.name)
      found.push(path)
      if (entry.isDirectory()) pending.push(path)
    }
  }
  return found
}

/**
 * Issue 17, item 6: what a hostile sandbox leaves in a writable host
 * directory, for host tools that walk it without cordon's care. After
 * `destroy()`, and after the host died without destroying, the directory
 * holds no FIFO or socket, no set-id bit, and no link that leads out of it.
 */
const PLANT = [
  'mkfifo fifo',
  'echo data > setuid && chmod 4755 setuid',
  'echo data > setgid && chmod 2755 setgid',
  'mkdir sgid-dir && chmod 2775 sgid-dir',
  'ln -s /etc/shadow shadow-link',
  'ln -s ../../../../etc escape-link',
  'echo kept > kept.txt && ln -s kept.txt inside-link',
  'mkdir -p nested/deeper && mkfifo nested/deeper/fifo && ln -s / nested/root-link',
  'mkdir locked && mkfifo locked/fifo && chmod 000 locked',
  // A chain whose every link reads as staying inside, which the kernel climbs out of.
  'ln -s . l0 && for n in 1 2 3 4 5 6 7 8 9 10; do ln -s "l$((n - 1))/.." "l$n"; done',
  'ln -s l10/etc/shadow chain-shadow',
  // Through a subdirectory's link, and a link to a link that leads out.
  'mkdir -p sub/inner && ln -s .. sub/inner/parent && ln -s sub/inner/parent/../.. through-sub',
  'ln -s shadow-link link-to-link',
  // Hidden in a directory the sandbox made write-only.
  'mkdir writeonly && ln -s /etc writeonly/etc && chmod 300 writeonly',
  'touch "$(printf \'name\\033]0;pwned\\007\\nwith newline\')"',
  // Device files need CAP_MKNOD, which the sandbox does not have.
  'mknod device c 1 3 2>/dev/null && echo MKNOD-WORKED',
  // A process that keeps planting traps until it is killed.
  '(while :; do mkfifo late-$$-$RANDOM 2>/dev/null; sleep 0.01; done) >/dev/null 2>&1 &',
  'sleep 0.3',
].join('\n')

async function expectSealed(root: string): Promise<void> {
  const entries = await walk(root)
  const names = entries.map((path) => relative(root, path))
  const realRoot = await realpath(root)
  for (const path of entries) {
    const stats = await lstat(path)
    const name = relative(root, path)
    if (stats.isSymbolicLink()) {
      // Where the host's kernel takes it, not what its text says: inside, or nowhere.
      const target = await realpath(path).catch(() => undefined)
      if (target !== undefined)
        expect(
          target === realRoot || target.startsWith(`${realRoot}/`),
          `${name} -> ${target}`,
        ).toBe(true)
      continue
    }
    expect(stats.isFile() || stats.isDirectory(), `${name} is a file or a directory`).toBe(true)
    expect(stats.mode & 0o6000, `${name} has no set-id bit`).toBe(0)
  }
  // What is not a trap is kept, names included.
  expect(names).toEqual(
    expect.arrayContaining([
      'kept.txt',
      'inside-link',
      'setuid',
      'setgid',
      'sgid-dir',
      'nested/deeper',
      'locked',
    ]),
  )
  expect(names.some((name) => name.includes('\n') && name.includes('\x1b'))).toBe(true)
  expect(await readFile(join(root, 'inside-link'), 'utf8')).toBe('kept\n')
  for (const gone of [
    'fifo',
    'shadow-link',
    'escape-link',
    'nested/root-link',
    'chain-shadow',
    'l1',
    'l10',
    'through-sub',
    'link-to-link',
    'writeonly/etc',
  ])
    expect(names, gone).not.toContain(gone)
  expect(names).toEqual(expect.arrayContaining(['l0', 'sub/inner/parent']))
  expect(names.some((name) => name.startsWith('late-'))).toBe(false)
}

async function hostDirectory(): Promise<string> {
  const root = await mkdtemp(join(tmpdir(), 'cordon-seal-'))
  await chmod(root, 0o1777)
  return root
}

describe('writable host directories are safe for host tools once the sandbox ends (Docker)', () => {
  for (const runtime of ['docker', 'runsc'] as const) {
    it(`after destroy(), no FIFO, set-id bit or link out is left (${runtime})`, async () => {
      const root = await hostDirectory()
      const provider = testProvider(
        { runtime },
        { layout: { outputs: { source: { type: 'hostDir', hostPath: root } } } },
      )
      try {
        const sandbox = await provider.create()
        const planted = await sandbox.exec('sh', ['-c', PLANT], { cwd: sandbox.rootDir })
        expect(planted.stdout + planted.stderr).not.toContain('MKNOD-WORKED')
        expect(planted.exitCode).not.toBe(2)
        // While it runs, the directory is the sandbox's to shape: the traps are there.
        // (gVisor keeps FIFOs inside its own kernel: the host never sees them.)
        if (runtime === 'docker') expect((await lstat(join(root, 'fifo'))).isFIFO()).toBe(true)
        expect((await lstat(join(root, 'setuid'))).mode & 0o4000).toBe(0o4000)
        await sandbox.destroy()
        await expectSealed(root)
      } finally {
        await provider.close()
        await rm(root, { recursive: true, force: true })
      }
    })
  }

  for (const runtime of ['docker', 'runsc'] as const) {
    it(`a link out at a depth past PATH_MAX is removed too, and one that stays in is kept (${runtime})`, async () => {
      const root = await hostDirectory()
      const provider = testProvider(
        { runtime },
        { layout: { outputs: { source: { type: 'hostDir', hostPath: root } } } },
      )
      // A link out and one in, then 18 directories of 250-character names
      // put over them one at a time (each `mv` names short paths): the links
      // end up over 4,500 bytes from the root, which no single path call reaches.
      const plant = [
        `mkdir bottom && ln -s ${'../'.repeat(60)}etc/shadow bottom/deep-shadow`,
        'echo kept > bottom/deep-kept.txt && ln -s deep-kept.txt bottom/deep-inside',
        'n=10; while [ $n -lt 28 ]; do mkdir over && mv bottom over/$n$(printf "%0248d" 0) && mv over bottom || exit 3; n=$((n+1)); done',
      ].join(' && ')
      const find = (...args: string[]) =>
        execFileSync('find', [root, ...args], { encoding: 'utf8' })
          .split('\n')
          .filter(Boolean)
      try {
        const sandbox = await provider.create()
        const planted = await sandbox.exec('sh', ['-c', plant], { cwd: sandbox.rootDir })
        expect(planted.exitCode, planted.stderr).toBe(0)
        expect(find('-name', 'deep-shadow')).toHaveLength(1)
        await sandbox.destroy()
        // find walks by descriptor, as cp -r, tar and rsync do: it reaches the bottom.
        expect(find('-name', 'deep-shadow')).toEqual([])
        expect(find('-name', 'deep-inside', '-type', 'l')).toHaveLength(1)
        expect(find('-name', 'deep-kept.txt', '-type', 'f')).toHaveLength(1)
      } finally {
        await provider.close()
        execFileSync('rm', ['-rf', '--', root])
      }
    })
  }

  for (const runtime of ['docker', 'runsc'] as const) {
    it(`a tree made slow to judge does not outlast the seal: its link out is removed (${runtime})`, async () => {
      // 300 nested directories and 60 links whose targets are `x/../` 800
      // times: the seal once reached every step's directory from the root,
      // about 14 million opens, and destroy() let the engine kill the agent
      // after 10 s, before any link was removed: `shadow` stayed.
      const root = await hostDirectory()
      const provider = testProvider(
        { runtime },
        { layout: { outputs: { source: { type: 'hostDir', hostPath: root } } } },
      )
      const plant = [
        'ln -s /etc/shadow shadow',
        'p=.; i=0; while [ $i -lt 300 ]; do p=$p/d; i=$((i+1)); done; mkdir -p $p',
        `cd $p && j=0; while [ $j -lt 60 ]; do ln -s '${'x/../'.repeat(800)}' slow$j; j=$((j+1)); done`,
        `ln -s '${'../'.repeat(301)}etc' out && ln -s '${'../'.repeat(300)}kept.txt' in`,
        'cd - >/dev/null && echo kept > kept.txt',
      ].join('\n')
      const find = (...args: string[]) =>
        execFileSync('find', [root, ...args], { encoding: 'utf8' })
          .split('\n')
          .filter(Boolean)
      try {
        const sandbox = await provider.create()
        const planted = await sandbox.exec('sh', ['-c', plant], { cwd: sandbox.rootDir })
        expect(planted.exitCode, planted.stderr).toBe(0)
        expect(find('-maxdepth', '1', '-name', 'shadow')).toHaveLength(1)
        await sandbox.destroy()
        expect(find('-maxdepth', '1', '-name', 'shadow')).toEqual([])
        expect(find('-name', 'out')).toEqual([])
        // Judged by where they resolve, not by their text: these stay.
        expect(find('-name', 'in', '-type', 'l')).toHaveLength(1)
        expect(find('-name', 'slow*', '-type', 'l')).toHaveLength(60)
      } finally {
        await provider.close()
        execFileSync('rm', ['-rf', '--', root])
      }
    })
  }

  for (const runtime of ['docker', 'runsc'] as const) {
    it(`a paused sandbox is sealed when destroyed (${runtime})`, async () => {
      // destroy() waits for the agent's seal, however long it takes: a
      // frozen agent would never end, so the sandbox must be thawed first.
      const root = await hostDirectory()
      const provider = testProvider(
        { runtime },
        { layout: { outputs: { source: { type: 'hostDir', hostPath: root } } } },
      )
      try {
        const sandbox = await provider.create()
        const planted = await sandbox.exec(
          'sh',
          ['-c', 'ln -s /etc/shadow shadow && echo kept > kept.txt'],
          { cwd: sandbox.rootDir },
        )
        expect(planted.exitCode, planted.stderr).toBe(0)
        await sandbox.pause()
        await sandbox.destroy()
        expect(await readdir(root)).toEqual(['kept.txt'])
        expect((await lstat(join(root, 'kept.txt'))).uid).toBe(0)
      } finally {
        await provider.close()
        await rm(root, { recursive: true, force: true })
      }
    })
  }

  for (const runtime of ['docker', 'runsc'] as const) {
    it(`hands what the sandbox left to the directory's owner, who can then manage it without privileges (${runtime})`, async () => {
      const root = await hostDirectory()
      const hostUser = { uid: 3456, gid: 3457 }
      await chown(root, hostUser.uid, hostUser.gid)
      const provider = testProvider(
        { runtime },
        { layout: { outputs: { source: { type: 'hostDir', hostPath: root } } } },
      )
      try {
        const sandbox = await provider.create()
        const info = await docker.getContainer(`cordon-${sandbox.id}`).inspect()
        // Only a sandbox with a writable host directory gives its agent these two.
        expect(info.HostConfig.CapAdd).toEqual(expect.arrayContaining(['FOWNER', 'CHOWN']))
        const made = await sandbox.exec(
          'sh',
          [
            '-c',
            [
              'mkdir -p build/obj locked readonly',
              'echo result > build/out.txt && echo o > build/obj/a.o',
              'echo secret > locked/inner && chmod 000 locked/inner && chmod 300 locked',
              'echo r > readonly/file && chmod 500 readonly',
              'ln -s out.txt build/latest',
              'id -u',
            ].join(' && '),
          ],
          { cwd: sandbox.rootDir },
        )
        expect(made.exitCode).toBe(0)
        const sandboxUid = Number(made.stdout.trim())
        // While it runs, its files are its own uid's, which no host account has.
        expect((await lstat(join(root, 'build/out.txt'))).uid).toBe(sandboxUid)
        await sandbox.destroy()
        for (const path of await walk(root)) {
          const stats = await lstat(path)
          expect(`${relative(root, path)} ${stats.uid}:${stats.gid}`).toBe(
            `${relative(root, path)} ${hostUser.uid}:${hostUser.gid}`,
          )
        }
        // The host user, without privileges: read, move, and remove everything.
        const asHostUser = (script: string) =>
          execFileSync(
            'setpriv',
            [
              `--reuid=${hostUser.uid}`,
              `--regid=${hostUser.gid}`,
              '--clear-groups',
              '--inh-caps=-all',
              'sh',
              '-c',
              script,
            ],
            { cwd: root, encoding: 'utf8' },
          )
        expect(asHostUser('cat build/out.txt build/latest')).toBe('result\nresult\n')
        asHostUser('mv build moved && chmod -R u+rwX . && rm -rf ./*')
        expect(await readdir(root)).toEqual([])
      } finally {
        await provider.close()
        await rm(root, { recursive: true, force: true })
      }
    })
  }

  for (const runtime of ['docker', 'runsc'] as const) {
    // An independent audit: chains of processes that fork and exit at once
    // emptied a pass of the agent's look at /proc, the seal ran with them
    // alive, and under gVisor about one run in four found a link to
    // /etc/shadow planted after it. Several runs, four chains each.
    it(`processes that fork and exit at once are all ended before the seal: no link planted after it (${runtime})`, async () => {
      const tool = await buildHostileTool()
      try {
        for (let run = 0; run < 4; run++) {
          const root = await hostDirectory()
          const provider = testProvider(
            { runtime },
            {
              layout: {
                outputs: { source: { type: 'hostDir', hostPath: root } },
                uploads: tool.uploads,
              },
            },
          )
          try {
            const sandbox = await provider.create()
            const started = await sandbox.exec(
              'sh',
              ['-c', `${HOSTILE_TOOL} fork-chain "$PWD" 4 && sleep 1`],
              { cwd: sandbox.rootDir },
            )
            expect(started.stdout).toBe('chaining\n')
            // The chains re-plant it as soon as it is missing: it is there now.
            expect((await lstat(join(root, 'evil'))).isSymbolicLink()).toBe(true)
            await sandbox.destroy()
            // Whatever outlived the kill would plant it again within milliseconds.
            await new Promise((wake) => setTimeout(wake, 500))
            expect(await readdir(root), `run ${run}: what is left after destroy()`).not.toContain(
              'evil',
            )
          } finally {
            await provider.close()
            await rm(root, { recursive: true, force: true })
          }
        }
      } finally {
        await tool.remove()
      }
    })
  }

  it('hands over to the owner the host names in handOverTo', async () => {
    const root = await hostDirectory()
    const provider = testProvider(
      {},
      {
        layout: {
          outputs: {
            source: { type: 'hostDir', hostPath: root, handOverTo: { uid: 2345, gid: 2346 } },
          },
        },
      },
    )
    try {
      const sandbox = await provider.create()
      await sandbox.exec('sh', ['-c', 'mkdir d && echo x > d/f'], { cwd: sandbox.rootDir })
      await sandbox.destroy()
      for (const name of ['d', 'd/f']) {
        const stats = await lstat(join(root, name))
        expect(`${name} ${stats.uid}:${stats.gid}`).toBe(`${name} 2345:2346`)
      }
    } finally {
      await provider.close()
      await rm(root, { recursive: true, force: true })
    }
  })

  it('also when the host dies without destroying its sandbox', async () => {
    const root = await hostDirectory()
    const script = fileURLToPath(new URL('./fixtures/crashing-owner.mjs', import.meta.url))
    const child = spawn(process.execPath, [script], {
      env: {
        ...process.env,
        CORDON_TEST_RUN_ID: testRunId(),
        CORDON_TEST_OUTPUTS: root,
        CORDON_TEST_PLANT: PLANT,
      },
      stdio: ['ignore', 'pipe', 'inherit'],
    })
    let output = ''
    child.stdout.on('data', (chunk: Buffer) => {
      output += chunk.toString()
    })
    try {
      await new Promise<void>((resolve, reject) => {
        child.on('exit', (code, signal) =>
          signal === 'SIGKILL' ? resolve() : reject(new Error(`host exited ${code}: ${output}`)),
        )
      })
      const sandboxId = /sandbox (sbx_\w+)/.exec(output)?.[1]
      expect(sandboxId).toBeDefined()
      // The container ends by itself once its attach is gone; its agent seals before it exits.
      const container = docker.getContainer(`cordon-${sandboxId}`)
      for (let waited = 0; ; waited += 200) {
        const gone = await container.inspect().then(
          () => false,
          () => true,
        )
        if (gone) break
        if (waited > 20_000) throw new Error('the sandbox outlived its host by 20 s')
        await new Promise((wake) => setTimeout(wake, 200))
      }
      await expectSealed(root)
    } finally {
      child.kill('SIGKILL')
      await rm(root, { recursive: true, force: true })
    }
  })
})
