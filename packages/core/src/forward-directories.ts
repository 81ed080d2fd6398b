import { lstat, mkdir, mkdtemp, readdir, readFile, rm, writeFile } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { SandboxOperationError } from './errors.js'
import { judgeOwner, ownerLabels } from './owner-labels.js'

/**
 * Where a host's unix-socket port forwards live: one well-known directory
 * per user under the temporary directory, `cordon-forwards-<uid>`, and in
 * it a directory per forward holding the socket and an owner file (the
 * host process's owner labels, as resources on an engine carry them). A
 * host that is killed cannot remove its forward's directory; the next
 * unix-socket forward this user opens, `cordon gc`, or any other call of
 * {@link sweepForwardDirectories}, finds it there and removes it once its
 * owner is gone.
 */
const OWNER_FILE = 'owner.json'
const FORWARD_PREFIX = 'forward-'

/** The per-user parent of forward directories under `tmpDir`. */
export function forwardDirectoriesRoot(tmpDir: string = tmpdir()): string {
  return join(tmpDir, `cordon-forwards-${process.getuid?.() ?? 'user'}`)
}

/**
 * The parent, made if absent. It is in a directory everyone can write: one
 * that is not this user's own directory of mode 0700 (made by someone else,
 * or a link) is refused, not used.
 */
async function ownRoot(tmpDir: string | undefined): Promise<string> {
  const root = forwardDirectoriesRoot(tmpDir)
  await mkdir(root, { mode: 0o700 }).catch((error: NodeJS.ErrnoException) => {
    if (error.code !== 'EEXIST') throw error
  })
  const info = await lstat(root)
  const uid = process.getuid?.()
  if (!info.isDirectory() || (uid !== undefined && info.uid !== uid) || (info.mode & 0o077) !== 0)
    throw new SandboxOperationError(
      'forwardPort',
      `${root} is not a directory of this user's with mode 0700: refusing to place a socket in it`,
    )
  return root
}

/**
 * A fresh directory for one forward's socket, mode 0700, with this process
 * recorded as its owner before anything else goes in.
 */
export async function makeForwardDirectory(tmpDir?: string): Promise<string> {
  const directory = await mkdtemp(join(await ownRoot(tmpDir), FORWARD_PREFIX))
  try {
    await writeFile(join(directory, OWNER_FILE), JSON.stringify(ownerLabels('forward')), {
      mode: 0o600,
    })
  } catch (error) {
    await rm(directory, { recursive: true, force: true })
    throw error
  }
  return directory
}

/**
 * Removes the forward directories whose owner is gone (as judgeOwner
 * decides: only an owner in this process's boot and namespaces can be
 * judged; any other's directory stays). Returns the directories removed
 * (with `dryRun`, those it would remove). A directory with no owner file
 * is one being made: it stays.
 */
export async function sweepForwardDirectories(
  options: { readonly tmpDir?: string; readonly dryRun?: boolean } = {},
): Promise<string[]> {
  const root = forwardDirectoriesRoot(options.tmpDir)
  const entries = await readdir(root).catch((error: NodeJS.ErrnoException) => {
    if (error.code === 'ENOENT') return []
    throw error
  })
  const removed: string[] = []
  for (const name of entries) {
    if (!name.startsWith(FORWARD_PREFIX)) continue
    const directory = join(root, name)
    const owner = await readFile(join(directory, OWNER_FILE), 'utf8').then(
      (text) => JSON.parse(text) as Record<string, string>,
      () => undefined,
    )
    if (!owner || judgeOwner(owner).state !== 'gone') continue
    if (!options.dryRun) await rm(directory, { recursive: true, force: true })
    removed.push(directory)
  }
  return removed
}
