/**
 * The grammar of an image reference, as the engine reads one
 * (`[host[:port]/]path[:tag][@digest]`, the path in lowercase; the Docker
 * distribution project's `reference` grammar). Checked with the config, so
 * that a name the engine cannot parse is refused naming `image` before
 * anything is made, not turned into an engine call that fails with the
 * engine's words ("Request path contains unescaped characters").
 */

const HOST_COMPONENT = '[a-z0-9](?:[a-z0-9-]*[a-z0-9])?'
const HOST = `${HOST_COMPONENT}(?:\\.${HOST_COMPONENT})*`
const PORT = '(?::[0-9]{1,5})?'

/** A registry host as image names spell it: `name[.name...][:port]`, no scheme or path. */
export const REGISTRY_HOST = new RegExp(`^${HOST}${PORT}$`, 'i')

const PATH_COMPONENT = '[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*'
const TAG = '[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}'
const DIGEST = '[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,}'

/** `[host[:port]/]path`, tag, digest; the host may be in any case, the path may not. */
const REFERENCE = new RegExp(
  `^((?:(?:${HOST}${PORT}|\\[[0-9a-fA-F:.]+\\]${PORT})/)?${PATH_COMPONENT}(?:/${PATH_COMPONENT})*)(?::${TAG})?(?:@${DIGEST})?$`,
)

/**
 * An image name's host part and the rest, as the engine splits them: the
 * part before the first `/` is a registry host when it has a `.`, a `:` or a
 * `[` or is `localhost`; anything else is a path on Docker Hub
 * (`node:20-slim`, `team/tool`).
 */
function splitHost(name: string): { readonly host: string | undefined; readonly path: string } {
  const slash = name.indexOf('/')
  const first = slash < 0 ? '' : name.slice(0, slash)
  return /[.:[]/.test(first) || first === 'localhost'
    ? { host: first, path: name.slice(slash + 1) }
    : { host: undefined, path: name }
}

/**
 * The registry an image name is pulled from (compared without case, Docker
 * Hub's other names as `docker.io`), and the path within it.
 */
export function imageRegistry(name: string): { readonly registry: string; readonly path: string } {
  const { host, path } = splitHost(name)
  return { registry: host === undefined ? 'docker.io' : registryHostKey(host), path }
}

/**
 * A registry host as a key: hosts compare without case, and Docker Hub's
 * other names are `docker.io`.
 */
export function registryHostKey(host: string): string {
  const lower = host.toLowerCase()
  return lower === 'index.docker.io' || lower === 'registry-1.docker.io' ? 'docker.io' : lower
}

/** The engine's limit on a repository name (host and path). */
const MAX_NAME_LENGTH = 255

/** Why `name` is not an image reference the engine accepts, or undefined if it is one. */
export function imageReferenceProblem(name: string): string | undefined {
  // A host part may be in upper case (registries compare hosts without it); the path may not.
  const { host, path } = splitHost(name)
  const prefix = host === undefined ? '' : `${host.toLowerCase()}/`
  const match = REFERENCE.exec(prefix + path)
  if (!match) {
    const hint =
      /[A-Z]/.test(path.replace(/[:@].*$/, '')) && REFERENCE.test(prefix + path.toLowerCase())
        ? ': the repository name must be lowercase'
        : ''
    return `"${name}" is not an image reference the engine accepts ([host[:port]/]name[:tag][@digest], the name in lowercase letters, digits and . _ - separators)${hint}`
  }
  if (match[1]!.length > MAX_NAME_LENGTH) {
    return `"${name}" is not an image reference the engine accepts: its name is longer than ${MAX_NAME_LENGTH} characters`
  }
  return undefined
}
