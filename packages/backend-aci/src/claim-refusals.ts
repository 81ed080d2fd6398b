import { type ResolvedContainerSandboxLayout, SandboxControlRefusedError } from '@cordon/core'
import { type LayoutMountPlan, planLayoutMounts } from '@cordon/core/backend'
import { BACKEND_NAME } from './aci-defaults.js'
import type { ProfileFacts } from './profile-facts.js'

/**
 * The controls a claim cannot deliver, refused with a typed error instead of
 * being accepted and ignored. A claim may change only a container's config
 * map: network placement, memory, volumes and the process limit all come
 * from the container group profile and the pool's subnet.
 */

const refuse = (control: string, reason: string): never => {
  throw new SandboxControlRefusedError(control, BACKEND_NAME, reason)
}

/**
 * A claim cannot mount anything: `hostDir` (there is no host) and
 * `ephemeral` (storage the backend would create) are refused. `inImage` is
 * taken as it is; an `azureFileShare` must already be mounted by the profile.
 * Neither can be made `noexec`: ACI's volume mounts have no such option.
 */
export function refuseUnmountableLayout(layout: ResolvedContainerSandboxLayout): void {
  for (const mount of planLayoutMounts(layout)) {
    if (mount.noexec)
      refuse(
        `layout.${mountName(mount)}.noexec`,
        "a container group's volume mounts have no noexec option, and a claim cannot change them",
      )
    const kind = mount.source.type
    if (kind === 'inImage' || kind === 'azureFileShare') continue
    refuse(
      `layout.${mountName(mount)}.${kind}`,
      kind === 'hostDir'
        ? 'a container group has no host directory to mount'
        : 'a claim cannot add volumes; declare an emptyDir volume at this path in the container group profile and give the layout source inImage',
    )
  }
}

/** Each `azureFileShare` of the layout must be the profile's own mount of that share, at that path, with the role's access. */
export function refuseLayoutProfileMismatch(
  layout: ResolvedContainerSandboxLayout,
  profile: ProfileFacts,
): void {
  for (const mount of planLayoutMounts(layout)) {
    const source = mount.source
    if (source.type !== 'azureFileShare') continue
    const found = profile.mounts.find((candidate) => candidate.mountPath === mount.containerPath)
    const matches =
      found?.source.kind === 'azureFile' &&
      found.source.shareName === source.shareName &&
      found.source.storageAccountName === source.storageAccountName
    if (!matches) {
      refuse(
        `layout.${mountName(mount)}.azureFileShare`,
        `a claim cannot mount a share; the container group profile must mount ${source.storageAccountName}/${source.shareName} at ${mount.containerPath}`,
      )
    }
    if (found!.readOnly !== mount.readOnly) {
      refuse(
        `layout.${mountName(mount)}.azureFileShare`,
        `the profile mounts ${mount.containerPath} ${found!.readOnly ? 'read-only' : 'writable'} but the layout needs it ${mount.readOnly ? 'read-only' : 'writable'}`,
      )
    }
  }
}

function mountName(mount: LayoutMountPlan): string {
  return mount.role === 'skill' ? `skills.${mount.skillId}` : mount.role
}
