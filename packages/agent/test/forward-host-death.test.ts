import { type ChildProcess, spawn } from 'node:child_process'
import { existsSync, mkdirSync, mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { dirname, join } from 'node:path'
import { fileURLToPath } from 'node:url'
import {
  forwardDirectoriesRoot,
  makeForwardDirectory,
  sweepForwardDirectories,
} from '@cordon/core/backend'
import { afterEach, describe, expect, it } from 'vitest'

const cleanups: Array<() => unknown> = []

afterEach(() => {
  for (const cleanup of cleanups.splice(0).reverse()) cleanup()
})

/**
 * A host process with a unix-socket forward open (its temporary directory
 * is `tmpDir`, so the test's sweeps see this test's forwards alone):
 * resolves with the socket's path once it listens.
 */
async function hostForwarding(
  tmpDir: string,
): Promise<{ child: ChildProcess; socketPath: string }> {
  const portForward = new URL('../dist/sandbox/port-forward.js', import.meta.url).href
  const script = `
    import { PassThrough } from 'node:stream'
    const { forwardPort } = await import(${JSON.stringify(portForward)})
    const forward = await forwardPort(() => new PassThrough(), 8080, { unixSocket: true })
    process.stdout.write(forward.socketPath + '\\n')
    setInterval(() => {}, 60_000)
  `
  const child = spawn(process.execPath, ['--input-type=module', '-e', script], {
    cwd: fileURLToPath(new URL('..', import.meta.url)),
    env: { ...process.env, TMPDIR: tmpDir },
    stdio: ['ignore', 'pipe', 'pipe'],
  })
  cleanups.push(() => child.kill('SIGKILL'))
  let output = ''
  const socketPath = await new Promise<string>((resolve, reject) => {
    child.stdout!.on('data', (chunk: Buffer) => {
      output += chunk.toString()
      if (output.includes('\n')) resolve(output.trim())
    })
    child.stderr!.on('data', (chunk: Buffer) => (output += chunk.toString()))
    child.on('exit', () => reject(new Error(`the host ended before forwarding: ${output}`)))
  })
  return { child, socketPath }
}

async function killed(child: ChildProcess): Promise<void> {
  const exited = new Promise((resolve) => child.once('exit', resolve))
  child.kill('SIGKILL')
  await exited
}

describe("a unix-socket forward's directory", () => {
  it('outlives a SIGKILLed host, and the sweep removes it while leaving a live host’s', async () => {
    const tmpDir = mkdtempSync(join(tmpdir(), 'cordon-forward-death-'))
    cleanups.push(() => rmSync(tmpDir, { recursive: true, force: true }))
    const dead = await hostForwarding(tmpDir)
    const live = await hostForwarding(tmpDir)
    const deadDirectory = dirname(dead.socketPath)
    const liveDirectory = dirname(live.socketPath)
    // Both in the well-known parent, where a sweep finds them.
    expect(dirname(deadDirectory)).toBe(forwardDirectoriesRoot(tmpDir))
    expect(dirname(liveDirectory)).toBe(forwardDirectoriesRoot(tmpDir))

    await killed(dead.child)
    // Killed, the host removed nothing.
    expect(existsSync(dead.socketPath)).toBe(true)

    expect(await sweepForwardDirectories({ tmpDir, dryRun: true })).toEqual([deadDirectory])
    expect(existsSync(deadDirectory)).toBe(true)
    expect(await sweepForwardDirectories({ tmpDir })).toEqual([deadDirectory])
    expect(existsSync(deadDirectory)).toBe(false)
    expect(existsSync(live.socketPath)).toBe(true)
  })

  it('of a killed host is removed by the next forward this user opens', async () => {
    const tmpDir = mkdtempSync(join(tmpdir(), 'cordon-forward-death-'))
    cleanups.push(() => rmSync(tmpDir, { recursive: true, force: true }))
    const dead = await hostForwarding(tmpDir)
    await killed(dead.child)
    expect(existsSync(dead.socketPath)).toBe(true)
    const next = await hostForwarding(tmpDir)
    expect(existsSync(next.socketPath)).toBe(true)
    expect(existsSync(dirname(dead.socketPath))).toBe(false)
  })

  it('is refused where the well-known parent is not this user’s alone', async () => {
    const tmpDir = mkdtempSync(join(tmpdir(), 'cordon-forward-death-'))
    cleanups.push(() => rmSync(tmpDir, { recursive: true, force: true }))
    mkdirSync(forwardDirectoriesRoot(tmpDir), { mode: 0o755 })
    await expect(makeForwardDirectory(tmpDir)).rejects.toMatchObject({
      name: 'SandboxOperationError',
      operation: 'forwardPort',
    })
  })
})
