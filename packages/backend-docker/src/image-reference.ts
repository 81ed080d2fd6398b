import { imageRegistry } from '@cordon/builtin-backends'

/** What an image name says about where the image comes from. */
export interface ImageReference {
  /** The name as the config gives it. */
  readonly name: string
  /**
   * The name to pull: with `:latest` added when it names neither a tag nor a
   * digest, because the engine pulls every tag of an untagged name.
   */
  readonly pullName: string
  /** The registry host the engine pulls it from (`docker.io` for Docker Hub), compared without case. */
  readonly registry: string
}

/** Reads an image name the way the engine does (`imageRegistry`). */
export function parseImageReference(name: string): ImageReference {
  const { registry, path } = imageRegistry(name)
  const tagged = name.includes('@') || path.includes(':')
  return { name, pullName: tagged ? name : `${name}:latest`, registry }
}

/**
 * cordon's own test images (`cordon-test/busybox`, `cordon-test/node`) are
 * built on the engine by `tooling/engine/setup.sh` in cordon's repository
 * and are never pulled: a Docker Hub repository of that name is not cordon's.
 */
export function isCordonTestImage(reference: ImageReference): boolean {
  return reference.registry === 'docker.io' && /^(docker\.io\/)?cordon-test\//i.test(reference.name)
}
