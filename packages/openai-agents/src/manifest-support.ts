import type { Entry, Manifest } from '@openai/agents-core/sandbox'
import { SandboxUnsupportedFeatureError } from '@openai/agents-core/sandbox'

/**
 * Manifest features cordon cannot honour, refused before a sandbox is made.
 * Users and groups would need accounts cordon never creates (every command
 * runs as the sandbox's own unprivileged uid); mounts and git repositories
 * need network paths or privileges a cordon sandbox does not have (mounts
 * belong in the provider's layout, fetched code in a local_dir entry).
 */
export function assertManifestSupported(manifest: Manifest, backend: string): void {
  if (manifest.users.length > 0 || manifest.groups.length > 0) {
    throw unsupported(
      backend,
      'manifest users and groups',
      'commands run as the sandbox user; remove users and groups from the manifest',
    )
  }
  if (manifest.extraPathGrants.length > 0) {
    throw unsupported(
      backend,
      'manifest extraPathGrants',
      'the agent reaches its workspace only; put the files in the manifest entries or the provider layout',
    )
  }
  for (const { logicalPath, entry } of manifest.iterEntries())
    assertEntrySupported(entry, logicalPath, backend)
}

export function assertEntrySupported(entry: Entry, path: string, backend: string): void {
  if (entry.type === 'git_repo') {
    throw unsupported(
      backend,
      `git_repo entry "${path}"`,
      'clone on the host and use a local_dir entry (the sandbox reaches only what its egress policy allows)',
    )
  }
  if (
    entry.type !== 'file' &&
    entry.type !== 'dir' &&
    entry.type !== 'local_file' &&
    entry.type !== 'local_dir'
  ) {
    throw unsupported(
      backend,
      `${entry.type} entry "${path}"`,
      "mounts are the provider layout's job in cordon (layout.uploads, layout.skills, ...)",
    )
  }
  if (entry.group !== undefined) {
    throw unsupported(backend, `group of entry "${path}"`, 'files belong to the sandbox user')
  }
}

function unsupported(
  backend: string,
  feature: string,
  hint: string,
): SandboxUnsupportedFeatureError {
  return new SandboxUnsupportedFeatureError(
    `cordon (${backend}) does not support ${feature}: ${hint}.`,
    {
      provider: 'cordon',
      backend,
      feature,
    },
  )
}
