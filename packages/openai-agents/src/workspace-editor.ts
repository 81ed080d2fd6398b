import { posix } from 'node:path'
import { type Sandbox, SandboxFileNotFoundError } from '@cordon/core'
import { applyDiff, type Editor } from '@openai/agents-core'
import {
  SandboxApplyPatchFileNotFoundError,
  SandboxApplyPatchPathError,
  SandboxRuntimeError,
} from '@openai/agents-core/sandbox'

/** Largest file `update_file` patches, as the SDK's own Docker editor. */
const MAX_PATCH_SOURCE_BYTES = 10 * 1024 * 1024

/**
 * The SDK's `apply_patch` operations on a cordon sandbox: the diff is applied
 * on the host with the SDK's own `applyDiff`, and the result is written with
 * cordon's file operations. As in the SDK's Docker editor, `create_file`
 * refuses to replace an existing file.
 */
export function createWorkspaceEditor(sandbox: Sandbox, resolve: (path: string) => string): Editor {
  const readText = async (path: string, shown: string) => {
    try {
      return (await sandbox.readFile(path, { maxBytes: MAX_PATCH_SOURCE_BYTES })).toString('utf8')
    } catch (error) {
      if (SandboxFileNotFoundError.isInstance(error)) {
        throw new SandboxApplyPatchFileNotFoundError(`File not found: ${shown}`, { path: shown })
      }
      throw error
    }
  }
  return {
    async createFile(operation) {
      await createExclusively(
        sandbox,
        resolve(operation.path),
        applyDiff('', operation.diff, 'create'),
        operation.path,
      )
      return {}
    },
    async updateFile(operation) {
      const path = resolve(operation.path)
      const destination = operation.moveTo ? resolve(operation.moveTo) : path
      const next = applyDiff(await readText(path, operation.path), operation.diff)
      await sandbox.writeFile(destination, next)
      if (destination !== path) await remove(sandbox, path, operation.path)
      return {}
    },
    async deleteFile(operation) {
      await remove(sandbox, resolve(operation.path), operation.path)
      return {}
    },
  }
}

async function remove(sandbox: Sandbox, path: string, shown: string): Promise<void> {
  const removed = await sandbox.exec('rm', ['--', path])
  if (removed.exitCode !== 0) {
    throw new SandboxApplyPatchFileNotFoundError(
      `Could not delete ${shown}: ${removed.stderr.trim()}`,
      {
        path: shown,
      },
    )
  }
}

/**
 * Creates a file that must not exist yet, in one command: the shell's
 * noclobber makes the check and the creation one atomic step (no window for
 * another process to create it in between), missing parent directories are
 * made first, and the content arrives on stdin.
 */
async function createExclusively(
  sandbox: Sandbox,
  path: string,
  content: string,
  shown: string,
): Promise<void> {
  const created = await sandbox.exec(
    'sh',
    ['-c', 'mkdir -p -- "$2" && set -C && cat > "$1"', 'create-file', path, posix.dirname(path)],
    { stdin: content },
  )
  if (created.exitCode === 0) return
  if (/exists/i.test(created.stderr)) {
    throw new SandboxApplyPatchPathError(`File already exists: ${shown}`, { path: shown })
  }
  throw new SandboxRuntimeError(`Could not create ${shown}: ${created.stderr.trim()}`, {
    path: shown,
  })
}
