import { posix } from 'node:path'
import { SandboxPathResolutionError } from '@openai/agents-core/sandbox'

/**
 * Resolves a path the SDK hands the session (relative to the manifest root,
 * or absolute) to an absolute path inside the workspace. A path that leaves
 * the workspace is refused with the SDK's own path error: the agent's tools
 * reach the workspace, not the rest of the sandbox's filesystem.
 */
export function resolveWorkspacePath(root: string, path: string | undefined): string {
  const resolved = posix.resolve(root, path ?? '.')
  if (resolved === root || resolved.startsWith(root.endsWith('/') ? root : `${root}/`)) {
    return resolved
  }
  throw new SandboxPathResolutionError(`Path "${path}" is outside the sandbox workspace ${root}.`, {
    path,
    root,
  })
}
