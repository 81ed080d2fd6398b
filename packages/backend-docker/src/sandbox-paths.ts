import { posix } from 'node:path'
import { SandboxPathError } from '@cordon/core'

export interface ResolvedSandboxPath {
  /** Absolute, normalized path inside the sandbox. */
  readonly path: string
  /** The mount root that contains it. */
  readonly root: string
  /** `path` relative to `root` ('' for the root itself). */
  readonly relative: string
}

/**
 * Resolves a host-supplied path against the sandbox's `rootDir` and checks it
 * lies inside one of `roots`. The check is lexical; the engine then resolves
 * links inside the container's own filesystem, so a link cannot reach the host.
 */
export function resolveSandboxPath(
  input: string,
  rootDir: string,
  roots: readonly string[],
  purpose: 'read' | 'write',
): ResolvedSandboxPath {
  if (typeof input !== 'string' || input.length === 0)
    throw new SandboxPathError(String(input), 'a path is required')
  if (input.includes('\0')) throw new SandboxPathError(input, 'paths cannot contain NUL')
  const absolute = posix.normalize(input.startsWith('/') ? input : posix.join(rootDir, input))
  const path = absolute.length > 1 && absolute.endsWith('/') ? absolute.slice(0, -1) : absolute
  for (const root of roots) {
    if (path === root || path.startsWith(`${root}/`)) {
      return { path, root, relative: path === root ? '' : path.slice(root.length + 1) }
    }
  }
  throw new SandboxPathError(
    input,
    `outside the sandbox's ${purpose === 'write' ? 'writable' : 'readable'} directories (${roots.join(', ') || 'none'})`,
  )
}
