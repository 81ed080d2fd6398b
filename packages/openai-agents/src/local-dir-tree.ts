import { readdir } from 'node:fs/promises'
import { join } from 'node:path'
import { SandboxUnsupportedFeatureError } from '@openai/agents-core/sandbox'

/** A host directory's contents, as paths relative to it, sorted. */
export interface LocalDirTree {
  /** Every subdirectory, empty ones included, parents first. */
  readonly directories: string[]
  /** Every regular file. */
  readonly files: string[]
}

/**
 * Lists a `local_dir` entry's host directory without following links. A
 * symbolic link is refused rather than copied or skipped: following it could
 * copy host files from outside the directory into the sandbox, and dropping it
 * would leave the workspace silently unlike the directory. Sockets, FIFOs and
 * devices have no file content to copy and are refused the same way.
 */
export async function listLocalDir(root: string, entryPath: string): Promise<LocalDirTree> {
  const entries = await readdir(root, { recursive: true, withFileTypes: true })
  const directories: string[] = []
  const files: string[] = []
  for (const entry of entries) {
    const relative = join(entry.parentPath, entry.name).slice(root.length + 1)
    if (entry.isDirectory()) directories.push(relative)
    else if (entry.isFile()) files.push(relative)
    else {
      const kind = entry.isSymbolicLink() ? 'symbolic link' : 'special file'
      throw new SandboxUnsupportedFeatureError(
        `cordon does not copy the ${kind} "${relative}" of local_dir entry "${entryPath}" (from ${root}): replace it with the file it stands for, or remove it.`,
        {
          provider: 'cordon',
          feature: `${kind} in local_dir`,
          path: entryPath,
          hostPath: join(root, relative),
        },
      )
    }
  }
  // Sorting puts a parent before its children, for mkdir and for readers.
  return { directories: directories.sort(), files: files.sort() }
}
