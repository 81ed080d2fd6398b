import { readFile } from 'node:fs/promises'
import { join, resolve } from 'node:path'
import type { Sandbox, SandboxFileWrite } from '@cordon/core'
import type { Entry, Manifest } from '@openai/agents-core/sandbox'
import { permissionsForSandboxEntry, SandboxRuntimeError } from '@openai/agents-core/sandbox'
import { listLocalDir } from './local-dir-tree.js'
import { resolveWorkspacePath } from './workspace-path.js'

/** One manifest entry at its absolute path in the sandbox. */
export interface PlacedEntry {
  readonly absolutePath: string
  readonly entry: Entry
}

/** Every entry of a manifest at its path under `root` (the workspace), parents first. */
export function placeManifestEntries(manifest: Manifest, root = manifest.root): PlacedEntry[] {
  return [...manifest.iterEntries()].map(({ logicalPath, entry }) => ({
    absolutePath: resolveWorkspacePath(root, logicalPath),
    // A directory's children are yielded by iterEntries as entries of their own.
    entry: entry.type === 'dir' ? { ...entry, children: {} } : entry,
  }))
}

/**
 * Writes manifest entries into a sandbox: directories (a `local_dir`'s
 * subdirectories, empty ones included) in one command, every file (inline,
 * or copied from the host for `local_file` and `local_dir`, with the host
 * file's mode unless the entry gives one) in one batch where the backend has
 * one, then directory modes. Entries are checked by
 * `assertEntrySupported` first; only the four kinds it admits arrive here.
 */
export async function materializeEntries(
  sandbox: Sandbox,
  entries: readonly PlacedEntry[],
): Promise<void> {
  const directories: string[] = []
  const directoryModes: Array<[string, number]> = []
  const files: SandboxFileWrite[] = []
  for (const { absolutePath, entry } of entries) {
    const mode = entry.permissions === undefined ? undefined : fileMode(entry)
    switch (entry.type) {
      case 'dir':
        directories.push(absolutePath)
        if (mode !== undefined) directoryModes.push([absolutePath, mode])
        break
      case 'file':
        files.push({ path: absolutePath, content: entry.content, ...(mode ? { mode } : {}) })
        break
      // Host files are named, not read here: the batch reads each as it is sent.
      case 'local_file':
        files.push({ path: absolutePath, hostPath: resolve(entry.src), ...(mode ? { mode } : {}) })
        break
      case 'local_dir': {
        const source = resolve(entry.src)
        const tree = await listLocalDir(source, absolutePath)
        directories.push(absolutePath, ...tree.directories.map((dir) => `${absolutePath}/${dir}`))
        // The entry's permissions are the directory's; its files keep their host modes.
        if (mode !== undefined) directoryModes.push([absolutePath, mode])
        for (const relative of tree.files) {
          files.push({ path: `${absolutePath}/${relative}`, hostPath: join(source, relative) })
        }
        break
      }
    }
  }
  if (directories.length > 0) {
    const made = await sandbox.exec('mkdir', ['-p', '--', ...directories])
    if (made.exitCode !== 0) {
      throw new SandboxRuntimeError(
        `Could not create manifest directories: ${made.stderr.trim()}`,
        {
          provider: 'cordon',
          directories,
        },
      )
    }
  }
  await writeEntryFiles(sandbox, files)
  // Modes last, so that a directory made read-only still received its files.
  for (const [path, mode] of directoryModes) {
    const changed = await sandbox.exec('chmod', [mode.toString(8), '--', path])
    if (changed.exitCode !== 0) {
      throw new SandboxRuntimeError(`Could not set the mode of ${path}: ${changed.stderr.trim()}`, {
        provider: 'cordon',
        path,
      })
    }
  }
}

async function writeEntryFiles(
  sandbox: Sandbox,
  files: readonly SandboxFileWrite[],
): Promise<void> {
  if (files.length === 0) return
  if (sandbox.writeFiles) {
    await sandbox.writeFiles(files)
    return
  }
  for (const file of files) {
    const content = 'content' in file ? file.content : await readFile(file.hostPath)
    await sandbox.writeFile(file.path, content, file.mode ? { mode: file.mode } : undefined)
  }
}

function fileMode(entry: Entry): number {
  return permissionsForSandboxEntry(entry.permissions).toMode() & 0o7777
}
