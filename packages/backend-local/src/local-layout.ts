import { posix } from 'node:path'
import { SandboxControlRefusedError } from '@cordon/core'
import type { SandboxBackendContext } from '@cordon/core/backend'
import { BACKEND_NAME } from './definition.js'

type Layout = NonNullable<SandboxBackendContext['layout']>

/**
 * The one layout a local sandbox can honour: an `outputs` mount whose source
 * is `ephemeral`, which is the sandbox's temporary workspace. A local
 * process sees the host's own filesystem, so nothing can be mounted for it;
 * every other role, source or option is refused naming `layout.<role>`.
 * Returns the outputs mount's path as the host named it, or undefined
 * without a layout.
 */
export function checkLocalLayout(layout: Layout | undefined): string | undefined {
  if (!layout) return undefined
  const refuse = (control: string, reason: string): never => {
    throw new SandboxControlRefusedError(control, BACKEND_NAME, reason)
  }
  for (const role of ['uploads', 'scratch', 'toolResults', 'transcripts'] as const) {
    if (layout[role])
      refuse(
        `layout.${role}`,
        'a local process sees the host filesystem as it is; nothing can be mounted for it. Remove the mount (only an ephemeral outputs mount is supported)',
      )
  }
  if (layout.skills && layout.skills.length > 0)
    refuse(
      'layout.skills',
      'a local process sees the host filesystem as it is; nothing can be mounted for it. Remove the skills',
    )
  const { source } = layout.outputs
  if (source.type !== 'ephemeral')
    refuse(
      'layout.outputs',
      `the outputs of a local sandbox are its temporary workspace; a "${source.type}" source cannot be mounted. Use { type: 'ephemeral' }`,
    )
  if (source.type === 'ephemeral' && source.sizeMb !== undefined)
    refuse('layout.outputs.source.sizeMb', 'a local workspace has no size cap; remove sizeMb')
  if ('handOverTo' in source && source.handOverTo !== undefined)
    refuse(
      'layout.outputs.source.handOverTo',
      "a local workspace's files belong to the host's user already; remove handOverTo",
    )
  if (layout.outputs.noexec)
    refuse('layout.outputs.noexec', 'a local workspace cannot be mounted noexec; remove noexec')
  return layout.outputs.containerPath
}

/**
 * A working directory as the host named it, with the layout's outputs path
 * (the provider's default) mapped onto the workspace.
 */
export function mapWorkingDirectory(
  workingDirectory: string,
  outputsPath: string | undefined,
  workspace: string,
): string {
  if (outputsPath === undefined || !posix.isAbsolute(workingDirectory)) return workingDirectory
  const relative = posix.relative(outputsPath, posix.normalize(workingDirectory))
  if (relative === '') return workspace
  if (relative.startsWith('..') || posix.isAbsolute(relative)) return workingDirectory
  return posix.join(workspace, relative)
}
