import type Docker from 'dockerode'

/** Images whose environment has been read, per engine client. */
const known = new WeakMap<Docker, Map<string, Promise<Record<string, string>>>>()

/**
 * The environment an image declares (its `ENV` lines: PATH, language
 * settings and the like). The agent starts each command with exactly the
 * environment the host sends, so the sandbox's base environment is this,
 * under the sandbox's own. Read once per image and engine client.
 */
export function imageEnvironment(docker: Docker, image: string): Promise<Record<string, string>> {
  let images = known.get(docker)
  if (!images) {
    images = new Map()
    known.set(docker, images)
  }
  let pending = images.get(image)
  if (!pending) {
    pending = docker
      .getImage(image)
      .inspect()
      .then((info) =>
        Object.fromEntries(
          (info.Config?.Env ?? []).flatMap((entry) => {
            const equals = entry.indexOf('=')
            return equals > 0 ? [[entry.slice(0, equals), entry.slice(equals + 1)]] : []
          }),
        ),
      )
    images.set(image, pending)
    pending.catch(() => images.delete(image))
  }
  return pending
}

/** Drops what was read of `image` (it left the engine; a pulled replacement may declare another environment). */
export function forgetImageEnvironment(docker: Docker, image: string): void {
  known.get(docker)?.delete(image)
}
