import { type ChildProcess, spawn } from 'node:child_process'
import { existsSync, mkdtempSync, readdirSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { basename, dirname, join } from 'node:path'
import { fileURLToPath } from 'node:url'
import { forwardDirectoriesRoot, makeForwardDirectory } from '@cordon/core/backend'
import { afterEach, describe, expect, it } from 'vitest'
import { cordon } from './run-cli.js'

const cleanups: Array<() => unknown> = []

afterEach(() => {
  for (const cleanup of cleanups.splice(0).reverse()) cleanup()
})

/**
 * A host process whose temporary directory is `tmpDir`, holding a
 * unix-socket forward's directory (made as `forwardPort` makes it, with its
 * owner file, and a socket listening in it): resolves once the socket
 * listens.
 */
async function hostWithForwardDirectory(
  tmpDir: string,
): Promise<{ child: ChildProcess; directory: string }> {
  const script = `
    import { createServer } from 'node:net'
    import { join } from 'node:path'
    import { makeForwardDirectory } from '@cordon/core/backend'
    const directory = await makeForwardDirectory()
    createServer().listen(join(directory, 'port-8080.sock'), () => process.stdout.write(directory + '\\n'))
    setInterval(() => {}, 60_000)
  `
  const child = spawn(process.execPath, ['--input-type=module', '-e', script], {
    cwd: fileURLToPath(new URL('..', import.meta.url)),
    env: { ...process.env, TMPDIR: tmpDir },
    stdio: ['ignore', 'pipe', 'pipe'],
  })
  cleanups.push(() => child.kill('SIGKILL'))
  let output = ''
  const directory = await new Promise<string>((resolve, reject) => {
    child.stdout!.on('data', (chunk: Buffer) => {
      output += chunk.toString()
      if (output.includes('\n')) resolve(output.trim())
    })
    child.stderr!.on('data', (chunk: Buffer) => (output += chunk.toString()))
    child.on('exit', () => reject(new Error(`the host ended before its forward: ${output}`)))
  })
  return { child, directory }
}

async function killed(child: ChildProcess): Promise<void> {
  const exited = new Promise((resolve) => child.once('exit', resolve))
  child.kill('SIGKILL')
  await exited
}

/** A fresh directory, removed after the test. */
function scratch(prefix: string): string {
  const directory = mkdtempSync(join(tmpdir(), prefix))
  cleanups.push(() => rmSync(directory, { recursive: true, force: true }))
  return directory
}

describe('cordon gc and the port-forward directories', () => {
  it("lists a killed host's forward directory with --dry-run, removes it without, and keeps a live host's", async () => {
    // The temporary directory of the hosts and of gc alike: the real one's forwards are never looked at.
    const tmpDir = scratch('cordon-gc-forwards-')
    // Credentials of this test's own, so gc prunes nothing of the user's.
    const store = scratch('cordon-gc-forwards-store-')
    const root = forwardDirectoriesRoot(tmpDir)
    const dead = await hostWithForwardDirectory(tmpDir)
    // This test process is the live host.
    const live = await makeForwardDirectory(tmpDir)
    expect(dirname(dead.directory)).toBe(root)
    expect(dirname(live)).toBe(root)
    await killed(dead.child)
    // Killed, the host removed nothing.
    expect(existsSync(join(dead.directory, 'port-8080.sock'))).toBe(true)

    const env = { TMPDIR: tmpDir }
    const dry = await cordon(['gc', '--dry-run', '--credential-store', store], env)
    expect(dry.code, dry.stderr).toBe(0)
    expect(dry.stdout).toContain(
      `cordon gc (${root}): would remove 1 port-forward directories of hosts that are gone: ${basename(dead.directory)}\n`,
    )
    expect(dry.stdout).not.toContain(basename(live))
    expect(readdirSync(root).sort()).toEqual([basename(dead.directory), basename(live)].sort())

    const real = await cordon(['gc', '--credential-store', store], env)
    expect(real.code, real.stderr).toBe(0)
    expect(real.stdout).toContain(
      `cordon gc (${root}): removed 1 port-forward directories of hosts that are gone: ${basename(dead.directory)}\n`,
    )
    expect(readdirSync(root)).toEqual([basename(live)])

    // Nothing left to remove: the live host's directory stays, run after run.
    const again = await cordon(['gc', '--credential-store', store], env)
    expect(again.code, again.stderr).toBe(0)
    expect(again.stdout).toContain(
      `cordon gc (${root}): removed 0 port-forward directories of hosts that are gone\n`,
    )
    expect(readdirSync(root)).toEqual([basename(live)])
  }, 120_000)

  it('reports a sweep that fails on stderr and exits 1', async () => {
    const tmpDir = scratch('cordon-gc-forwards-')
    const store = scratch('cordon-gc-forwards-store-')
    const root = forwardDirectoriesRoot(tmpDir)
    // A file where the parent of forward directories should be: it cannot be listed.
    writeFileSync(root, '')
    const result = await cordon(['gc', '--dry-run', '--credential-store', store], {
      TMPDIR: tmpDir,
    })
    expect(result.code).toBe(1)
    expect(result.stderr).toContain(`cordon gc (${root}): could not sweep: ENOTDIR`)
    // The other sweeps ran and reported.
    expect(result.stdout).toMatch(/would remove \d+ containers/)
    expect(result.stdout).toContain('credentials of ended detached sandboxes')
  }, 120_000)

  it('leaves them alone under --label, which they carry none of', async () => {
    const tmpDir = scratch('cordon-gc-forwards-')
    const store = scratch('cordon-gc-forwards-store-')
    const root = forwardDirectoriesRoot(tmpDir)
    const dead = await hostWithForwardDirectory(tmpDir)
    await killed(dead.child)
    // A label nothing on the engine carries: the Docker sweep touches nothing of anyone's.
    const result = await cordon(
      ['gc', '--label', `cordon-test.gc-forwards=${process.pid}`, '--credential-store', store],
      { TMPDIR: tmpDir },
    )
    expect(result.code, result.stderr).toBe(0)
    expect(result.stdout).toContain(`cordon gc: left the port-forward directories in ${root} alone`)
    expect(readdirSync(root)).toEqual([basename(dead.directory)])
  }, 120_000)
})
