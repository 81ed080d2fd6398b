import { execFileSync } from 'node:child_process'
import { randomBytes, randomUUID } from 'node:crypto'
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import {
  pushTestImage,
  startLocalRegistry,
  startRegistryProxy,
} from '../../../tooling/engine/test-registry.mjs'
import { cordon, spawnCordon, waitFor } from './run-cli.js'

/**
 * A signal to cordon ends whatever command it runs as it ends `run`: what
 * the command made is removed and cordon exits 128 plus the signal's
 * number, saying it was interrupted (not the abort's own error, nor 125).
 */

/** Whether the engine has `image`. */
function imageExists(image: string): boolean {
  try {
    execFileSync('docker', ['image', 'inspect', image], { stdio: 'ignore' })
    return true
  } catch {
    return false
  }
}

/** Every container on the engine whose command holds `marker`. */
function containersRunning(marker: string): string[] {
  return execFileSync('docker', ['ps', '--all', '--no-trunc', '--format', '{{.Command}}'], {
    encoding: 'utf8',
  })
    .split('\n')
    .filter((command) => command.includes(marker))
}

describe('a signal to cordon build and cordon prepare', () => {
  const context = mkdtempSync(join(tmpdir(), 'cordon-cli-interrupt-'))
  let registry: Awaited<ReturnType<typeof startLocalRegistry>> | undefined
  let proxy: Awaited<ReturnType<typeof startRegistryProxy>> | undefined
  const source = `cordon-test-cli-interrupt-${process.pid}:1`

  beforeAll(async () => {
    registry = await startLocalRegistry()
    proxy = await startRegistryProxy(registry.port, { slowBlobs: true })
    // An image with a layer of its own, pushed and then gone from the engine, so each pull downloads it.
    writeFileSync(join(context, 'payload'), randomBytes(2 * 1024 * 1024))
    writeFileSync(
      join(context, 'Dockerfile'),
      'FROM cordon-test/busybox:latest\nCOPY payload /payload\n',
    )
    const built = await cordon(['build', '--tag', source, context])
    if (built.code !== 0) throw new Error(`cordon build failed: ${built.stderr}`)
    await pushTestImage(source, `${registry.host}/cordon-test/interrupted:1`)
    execFileSync('docker', ['image', 'rm', source], { stdio: 'ignore' })
  }, 120_000)

  afterAll(async () => {
    await proxy?.stop()
    await registry?.stop()
    rmSync(context, { recursive: true, force: true })
  })

  it.each([
    ['SIGINT', 130],
    ['SIGTERM', 143],
  ] as const)(
    'cordon build on %s ends the build, removes its step container and exits %i',
    async (signal, code) => {
      const marker = `cordon-interrupt-${randomUUID()}`
      const directory = mkdtempSync(join(tmpdir(), 'cordon-cli-interrupt-build-'))
      const tag = `cordon-test-cli-interrupt-build-${process.pid}:1`
      try {
        writeFileSync(
          join(directory, 'Dockerfile'),
          `FROM cordon-test/busybox:latest\nRUN echo ${marker} && sleep 60\n`,
        )
        const child = spawnCordon(['build', '--tag', tag, directory])
        await waitFor('the slow step', () =>
          child.stderrText().includes(`${marker}\n`) ? true : undefined,
        )
        child.kill(signal)
        expect(await child.exited).toBe(code)
        expect(child.stderrText()).toMatch(/\ncordon: interrupted\n$/)
        expect(child.stderrText()).not.toContain('[ABORTED]')
        expect(containersRunning(marker)).toEqual([])
        expect(imageExists(tag)).toBe(false)
      } finally {
        rmSync(directory, { recursive: true, force: true })
      }
    },
    90_000,
  )

  it('cordon prepare on SIGINT ends its pull on the engine and exits 130', async () => {
    const image = `${proxy!.host}/cordon-test/interrupted:1`
    const child = spawnCordon(['prepare', '--image', image])
    await waitFor('a layer download', () => (proxy!.slowDownloads() > 0 ? true : undefined))
    child.kill('SIGINT')
    expect(await child.exited).toBe(130)
    expect(child.stderrText()).toContain(`cordon: pulling ${image}\n`)
    expect(child.stderrText()).toMatch(/\ncordon: interrupted\n$/)
    // The engine let go of the download: the pull ended there too.
    await waitFor('the download to end', () => (proxy!.slowDownloads() === 0 ? true : undefined))
    expect(imageExists(image)).toBe(false)
  }, 90_000)
})
