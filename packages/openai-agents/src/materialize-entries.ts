import { readdir, readFile } from 'node:fs/promises'
import { join, resolve } from 'node:path'
import type { Sandbox, SandboxFileWrite } from '@cordon/core'
import type { Entry, Manifest } from '@openai/agents-core/sandbox'
import { permissionsForSandboxEntry, SandboxRuntimeError } from '@openai/agents-core/sandbox'
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
 * Writes manifest entries into a sandbox: directories in one command, every
 * file (inline, or copied from the host for `local_file` and `local_dir`,
 * with the host file's mode unless the entry gives one) in one batch where
 * the backend has one. Entries are checked by
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
      case 'local_dir':
        for (const relative of await listHostFiles(resolve(entry.src))) {
          files.push({
            path: `${absolutePath}/${relative}`,
            hostPath: join(resolve(entry.src), relative),
          })
        }
        break
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
  for (const [path, mode] of directoryModes) {
    const changed = await sandbox.exec('chmod', [mode.toString(8), '--', path])
    if (changed.exitCode !== 0) {
      throw new SandboxRuntimeError(`Could not set the mode of ${path}: ${changed.stderr.trim()}`, {
        provider: 'cordon',
        path,
      })
    }
  }
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

/** Every regular file under a host directory, as paths relative to it. */
async function listHostFiles(root: string): Promise<string[]> {
  const entries = await readdir(root, { recursive: true, withFileTypes: true })
  return entries
    .filter((entry) => entry.isFile())
    .map((entry) => join(entry.parentPath, entry.name).slice(root.length + 1))
    .sort()
}
