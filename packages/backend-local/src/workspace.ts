import { mkdir, mkdtemp, readdir, readFile, rm, writeFile } from 'node:fs/promises'
import { join } from 'node:path'
import { judgeOwner, ownerLabels } from '@cordon/core/backend'

/** The prefix of every sandbox directory this backend makes, so a sweep touches nothing else. */
export const SANDBOX_DIR_PREFIX = 'cordon-local-'
/** The file that names a sandbox directory's owner (the host process), outside the workspace. */
export const OWNER_FILE = 'owner.json'

/**
 * One sandbox's directory: `<parent>/cordon-local-XXXXXX/`, holding the
 * owner file and `workspace/`, the only directory the agent may write to
 * (its write root, the sandbox's `rootDir`).
 */
export interface SandboxDirectory {
  readonly dir: string
  readonly workspace: string
}

/**
 * Makes a sandbox directory owned by this process: the owner file carries
 * core's owner labels (pid, its start time, the boot and namespaces), so a
 * later sweep can tell a dead owner's directory from a live one's.
 */
export async function makeSandboxDirectory(
  parent: string,
  providerId: string,
  sandboxId: string,
): Promise<SandboxDirectory> {
  const dir = await mkdtemp(join(parent, SANDBOX_DIR_PREFIX))
  try {
    await writeFile(
      join(dir, OWNER_FILE),
      JSON.stringify({ ...ownerLabels(providerId), sandbox: sandboxId }),
      { mode: 0o600 },
    )
    const workspace = join(dir, 'workspace')
    await mkdir(workspace, { mode: 0o700 })
    return { dir, workspace }
  } catch (error) {
    await rm(dir, { recursive: true, force: true })
    throw error
  }
}

/**
 * Removes the sandbox directories under `parent` whose owner is gone (its
 * pid is free or now another process). A directory whose owner is alive, or
 * cannot be judged from here (another boot, another pid namespace, no owner
 * file yet because it is being made), stays. Returns the directories removed.
 */
export async function sweepDeadOwners(parent: string): Promise<string[]> {
  let names: string[]
  try {
    names = await readdir(parent)
  } catch {
    return []
  }
  const removed: string[] = []
  for (const name of names) {
    if (!name.startsWith(SANDBOX_DIR_PREFIX)) continue
    const dir = join(parent, name)
    let labels: Record<string, string>
    try {
      labels = JSON.parse(await readFile(join(dir, OWNER_FILE), 'utf8'))
    } catch {
      continue
    }
    if (judgeOwner(labels).state !== 'gone') continue
    await rm(dir, { recursive: true, force: true }).then(
      () => removed.push(dir),
      () => {},
    )
  }
  return removed
}
