import { spawnSync } from 'node:child_process'
import { fileURLToPath } from 'node:url'
import { expect } from 'vitest'
import { docker } from './test-run.js'

/**
 * A volume with cordon's owner labels (and the test run's, and `labels`),
 * made by a process that has exited since: garbage to every sweep whose
 * scope it is in.
 */
export function leaveDeadOwnersVolume(labels: Readonly<Record<string, string>> = {}): string {
  const script = `
    import { ownerLabels } from '@cordon/core/backend'
    import { testRunLabels } from '@cordon/test-support'
    import Docker from 'dockerode'
    const labels = { ...ownerLabels('dead-owner-test'), ...testRunLabels(), ...JSON.parse(process.argv[1]) }
    const volume = await new Docker().createVolume({ Name: 'cordon-test-dead-' + process.pid, Labels: labels })
    process.stdout.write(volume.name)
  `
  const made = spawnSync(
    process.execPath,
    ['--input-type=module', '-e', script, JSON.stringify(labels)],
    { cwd: fileURLToPath(new URL('..', import.meta.url)), encoding: 'utf8' },
  )
  expect(made.status, made.stderr).toBe(0)
  return made.stdout.trim()
}

export async function volumeGoneWithin(name: string, ms: number): Promise<boolean> {
  for (const deadline = Date.now() + ms; Date.now() < deadline; ) {
    const gone = await docker
      .getVolume(name)
      .inspect()
      .then(
        () => false,
        (error: { statusCode?: number }) => error.statusCode === 404,
      )
    if (gone) return true
    await new Promise((resolve) => setTimeout(resolve, 250))
  }
  return false
}
