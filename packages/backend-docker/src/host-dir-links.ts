import { realpath } from 'node:fs/promises'
import { type ResolvedContainerSandboxLayout, SandboxConfigValidationError } from '@cordon/core'
import { planLayoutMounts, refusedHostTree } from '@cordon/core/backend'

/**
 * Refuses a `hostDir` whose path, followed through its links, is one of the
 * host trees a layout may not mount (`/tmp/x -> /proc`): the provider's
 * layout check is textual, because the engine's host may be another
 * machine. Here the engine is reached through a unix socket, so it is taken
 * to share this process's filesystem and the links are resolved with
 * `realpath`. An engine behind a forwarded socket or in a VM (Docker Desktop)
 * sees another filesystem; there only the textual check holds. A link
 * changed between this check and the engine's mount is not caught: the
 * directory is the host's, and whoever can change its links can already
 * change what it holds. A path that does not resolve is left to the engine,
 * which refuses a missing directory by name.
 */
export async function refuseLinkedHostTrees(
  layout: ResolvedContainerSandboxLayout,
  engineSocketPath: string | undefined,
): Promise<void> {
  if (engineSocketPath === undefined) return
  const issues: { path: string; message: string }[] = []
  for (const mount of planLayoutMounts(layout)) {
    if (mount.source.type !== 'hostDir') continue
    const resolved = await realpath(mount.source.hostPath).catch(() => undefined)
    const tree = resolved === undefined ? undefined : refusedHostTree(resolved)
    if (tree === undefined) continue
    issues.push({
      path: `layout.${mount.role === 'skill' ? `skills.${mount.skillId}` : mount.role}.source.hostPath`,
      message: `host directory ${JSON.stringify(mount.source.hostPath)} resolves to ${JSON.stringify(resolved)}, which would expose the host's ${tree}; mount a directory made for the sandbox instead`,
    })
  }
  if (issues.length > 0) throw new SandboxConfigValidationError('sandbox layout', issues)
}
