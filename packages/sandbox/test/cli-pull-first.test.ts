import { execFileSync } from 'node:child_process'
import { createHash, randomBytes } from 'node:crypto'
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import {
  pushTestImage,
  startLocalRegistry,
  startRegistryProxy,
} from '../../../tooling/engine/test-registry.mjs'
import { cordon, sandboxContainersOf, spawnCordon, waitFor } from './run-cli.js'

/**
 * `cordon run` pulls a missing image before it creates the sandbox, as
 * `cordon prepare --image` does: the pull has no deadline, and the create's
 * readiness budget (--ready-timeout) counts only the sandbox's own start.
 * The image comes through a proxy that sends its layer at 160 kB/s, so its
 * pull takes longer than the budget given.
 */

const READY_TIMEOUT_S = 4

function removeImage(image: string): void {
  try {
    execFileSync('docker', ['image', 'rm', image], { stdio: 'ignore' })
  } catch {}
}

describe('cordon run pulls first, outside the readiness budget', () => {
  const context = mkdtempSync(join(tmpdir(), 'cordon-cli-pull-first-'))
  let registry: Awaited<ReturnType<typeof startLocalRegistry>> | undefined
  let proxy: Awaited<ReturnType<typeof startRegistryProxy>> | undefined
  const source = `cordon-test-cli-pull-first-${process.pid}:1`
  const payload = randomBytes(1_200_000)

  beforeAll(async () => {
    const prepared = await cordon(['prepare'])
    if (prepared.code !== 0) throw new Error(`cordon prepare failed: ${prepared.stderr}`)
    registry = await startLocalRegistry()
    proxy = await startRegistryProxy(registry.port, { slowBlobs: true })
    writeFileSync(join(context, 'payload'), payload)
    writeFileSync(
      join(context, 'Dockerfile'),
      'FROM cordon-test/busybox:latest\nCOPY payload /payload\nUSER 0\nRUN sha256sum /payload > /payload.sha256\n',
    )
    const built = await cordon(['build', '--tag', source, context])
    if (built.code !== 0) throw new Error(`cordon build failed: ${built.stderr}`)
    for (const name of ['slow', 'interrupted'])
      await pushTestImage(source, `${registry.host}/cordon-test/${name}:1`)
    removeImage(source)
  }, 180_000)

  afterAll(async () => {
    await proxy?.stop()
    await registry?.stop()
    rmSync(context, { recursive: true, force: true })
  })

  it(`runs in an image whose pull takes longer than --ready-timeout ${READY_TIMEOUT_S}s`, async () => {
    const image = `${proxy!.host}/cordon-test/slow:1`
    try {
      const result = await cordon([
        'run',
        '--ready-timeout',
        `${READY_TIMEOUT_S}s`,
        '--image',
        image,
        '--',
        'cat',
        '/payload.sha256',
      ])
      expect(result.code, result.stderr).toBe(0)
      expect(result.stdout).toContain(createHash('sha256').update(payload).digest('hex'))
      const pulled = new RegExp(`cordon: pulled ${image} \\(.*\\) in ([\\d.]+) s\\n`).exec(
        result.stderr,
      )
      expect(pulled, result.stderr).not.toBeNull()
      expect(Number(pulled![1])).toBeGreaterThan(READY_TIMEOUT_S)
    } finally {
      removeImage(image)
    }
  }, 120_000)

  it('on SIGINT during the pull ends it, makes no sandbox and exits 130', async () => {
    const image = `${proxy!.host}/cordon-test/interrupted:1`
    try {
      const child = spawnCordon(['run', '--image', image, '--', 'true'])
      await waitFor('a layer download', () => (proxy!.slowDownloads() > 0 ? true : undefined))
      child.kill('SIGINT')
      expect(await child.exited).toBe(130)
      expect(child.stderrText()).toMatch(/\ncordon: interrupted\n$/)
      expect(sandboxContainersOf(child.pid!)).toEqual([])
      await waitFor('the download to end', () => (proxy!.slowDownloads() === 0 ? true : undefined))
    } finally {
      removeImage(image)
    }
  }, 90_000)
})
