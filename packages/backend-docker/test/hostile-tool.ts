import { execFileSync } from 'node:child_process'
import { chmod, mkdtemp, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { fileURLToPath } from 'node:url'
import type { ContainerSandboxLayoutMount } from '@cordon/core'

/**
 * `test/fixtures/hostile.c`, built statically for this machine (so it runs
 * in the busybox image) into a directory of its own, which a test mounts
 * read-only into its sandboxes as the uploads.
 */
export interface HostileTool {
  /** The layout mount that puts the tool at {@link HOSTILE_TOOL}. */
  readonly uploads: ContainerSandboxLayoutMount
  remove(): Promise<void>
}

export const HOSTILE_TOOL = '/mnt/user-data/uploads/hostile'

export async function buildHostileTool(): Promise<HostileTool> {
  const directory = await mkdtemp(join(tmpdir(), 'cordon-hostile-tool-'))
  await chmod(directory, 0o755)
  execFileSync('cc', [
    '-static',
    '-O2',
    '-o',
    join(directory, 'hostile'),
    fileURLToPath(new URL('./fixtures/hostile.c', import.meta.url)),
  ])
  return {
    uploads: { source: { type: 'hostDir', hostPath: directory } },
    remove: () => rm(directory, { recursive: true, force: true }),
  }
}
