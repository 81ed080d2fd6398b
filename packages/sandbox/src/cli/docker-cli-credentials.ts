import { execFile } from 'node:child_process'
import { readFile } from 'node:fs/promises'
import { homedir } from 'node:os'
import { join } from 'node:path'
import { imageRegistry, type RegistryCredential, registryHostKey } from '@cordon/builtin-backends'
import { SandboxConfigValidationError } from '@cordon/core'
import { loadDockerBackend } from './docker-backend-module.js'

/** How long a credential helper may take to answer. */
const HELPER_TIMEOUT_MS = 15_000

/** Docker Hub's key in the Docker CLI's config and its helpers' server URL. */
const DOCKER_HUB_SERVER = 'https://index.docker.io/v1/'

/** What the Docker CLI's `config.json` holds that concerns pulls. */
interface DockerCliConfig {
  readonly auths?: Record<string, DockerCliAuth>
  readonly credsStore?: string
  readonly credHelpers?: Record<string, string>
}

interface DockerCliAuth {
  readonly auth?: string
  readonly username?: string
  readonly password?: string
  readonly identitytoken?: string
}

/**
 * The credential `docker login` stored for the registry of `image`, as the
 * Docker CLI finds it for `docker pull`: in `$DOCKER_CONFIG/config.json`
 * (else `~/.docker/config.json`), from the registry's credential helper
 * (`credHelpers`), else the config's `auths` entry, else the default store
 * (`credsStore`). The command line hands it to the backend as its
 * `registryAuth` for that one registry; the API takes credentials only from
 * its caller. Undefined when nothing is stored for that registry (the pull
 * then goes without, as `docker pull` does). A config or helper cordon
 * cannot read, or a credential kind a registry login cannot use (an
 * identity token), is refused naming the config.
 */
export async function dockerCliCredential(
  image: string,
  env: NodeJS.ProcessEnv = process.env,
): Promise<{ readonly registry: string; readonly credential: RegistryCredential } | undefined> {
  const path = join(env.DOCKER_CONFIG ?? join(homedir(), '.docker'), 'config.json')
  const config = await readConfig(path)
  if (!config) return undefined
  const { registry } = imageRegistry(image)
  const refuse = (message: string): never => {
    throw new SandboxConfigValidationError(`Docker CLI config ${path}`, [
      { path: registry, message },
    ])
  }
  const helper =
    entryFor(config.credHelpers ?? {}, registry) ??
    (entryFor(config.auths ?? {}, registry) ? undefined : config.credsStore)
  const credential = helper
    ? await fromHelper(helper, registry, refuse)
    : fromAuthsEntry(entryFor(config.auths ?? {}, registry), refuse)
  return credential ? { registry, credential } : undefined
}

async function readConfig(path: string): Promise<DockerCliConfig | undefined> {
  let text: string
  try {
    text = await readFile(path, 'utf8')
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === 'ENOENT') return undefined
    throw new SandboxConfigValidationError(`Docker CLI config ${path}`, [
      { path: '', message: `cannot be read: ${(error as Error).message}` },
    ])
  }
  try {
    const parsed: unknown = JSON.parse(text)
    if (parsed && typeof parsed === 'object' && !Array.isArray(parsed)) {
      return parsed as DockerCliConfig
    }
  } catch {}
  throw new SandboxConfigValidationError(`Docker CLI config ${path}`, [
    { path: '', message: 'is not a JSON object' },
  ])
}

/**
 * The entry of `entries` for `registry`: keys are hosts or URLs
 * (`https://index.docker.io/v1/` for Docker Hub, `registry.example.com:5000`,
 * `https://ghcr.io`), compared as the registry host they name.
 */
function entryFor<T>(entries: Record<string, T>, registry: string): T | undefined {
  for (const [key, value] of Object.entries(entries)) {
    const host = key.replace(/^[a-z]+:\/\//i, '').replace(/\/.*$/, '')
    if (registryHostKey(host) === registry) return value
  }
  return undefined
}

function fromAuthsEntry(
  entry: DockerCliAuth | undefined,
  refuse: (message: string) => never,
): RegistryCredential | undefined {
  if (!entry) return undefined
  if (typeof entry.auth === 'string' && entry.auth !== '') {
    const decoded = Buffer.from(entry.auth, 'base64').toString('utf8')
    const colon = decoded.indexOf(':')
    if (colon <= 0 || colon === decoded.length - 1) {
      refuse('its "auth" is not base64 of username:password')
    }
    return { username: decoded.slice(0, colon), password: decoded.slice(colon + 1) }
  }
  if (entry.username && entry.password) {
    return { username: entry.username, password: entry.password }
  }
  if (entry.identitytoken) {
    refuse(
      'holds an identity token, which cordon cannot use for a pull; log in with a username and a password or access token, or pass registryAuth through the API',
    )
  }
  // An empty entry: the login lives in a store this config no longer names.
  return undefined
}

/** Asks `docker-credential-<helper>` for the registry's credential, as the Docker CLI does. */
async function fromHelper(
  helper: string,
  registry: string,
  refuse: (message: string) => never,
): Promise<RegistryCredential | undefined> {
  if (!/^[A-Za-z0-9_.-]+$/.test(helper))
    refuse(`names the credential helper "${helper}", not a program name`)
  const program = `docker-credential-${helper}`
  const server = registry === 'docker.io' ? DOCKER_HUB_SERVER : registry
  const answer = await new Promise<{ readonly out: string } | { readonly failure: string }>(
    (resolve) => {
      const child = execFile(
        program,
        ['get'],
        { timeout: HELPER_TIMEOUT_MS, maxBuffer: 1024 * 1024 },
        (error, stdout) => {
          if (!error) return resolve({ out: stdout })
          resolve({
            failure:
              (error as NodeJS.ErrnoException).code === 'ENOENT'
                ? 'not-found'
                : String(stdout || error.message).trim(),
          })
        },
      )
      child.stdin?.on('error', () => {})
      child.stdin?.end(server)
    },
  )
  if ('failure' in answer) {
    // The helpers' own words for "no login for that server".
    if (/credentials not found/i.test(answer.failure)) return undefined
    return refuse(
      answer.failure === 'not-found'
        ? `names the credential helper ${program}, which is not on PATH`
        : `its credential helper ${program} failed: ${answer.failure}`,
    )
  }
  let parsed: { Username?: unknown; Secret?: unknown }
  try {
    parsed = JSON.parse(answer.out) as { Username?: unknown; Secret?: unknown }
  } catch {
    return refuse(`its credential helper ${program} answered something other than JSON`)
  }
  if (typeof parsed.Username !== 'string' || typeof parsed.Secret !== 'string') {
    return refuse(`its credential helper ${program} answered without Username and Secret`)
  }
  if (parsed.Username === '<token>') {
    return refuse(
      `its credential helper ${program} holds an identity token, which cordon cannot use for a pull; log in with a username and a password or access token, or pass registryAuth through the API`,
    )
  }
  return { username: parsed.Username, password: parsed.Secret }
}

/**
 * The `registryAuth` the command line gives the Docker backend for `image`:
 * the Docker CLI's stored login for its registry, looked up only when the
 * engine lacks the image (a credential helper may ask its user for a
 * passphrase; `docker run` does not ask it for an image it has either).
 */
export async function registryAuthForImage(
  image: string,
  env: NodeJS.ProcessEnv = process.env,
): Promise<Record<string, RegistryCredential> | undefined> {
  const backend = await loadDockerBackend()
  let missing: boolean
  try {
    const { docker } = backend.connectEngine({})
    const inspect = (docker as { getImage(name: string): { inspect(): Promise<unknown> } })
      .getImage(image)
      .inspect()
    missing = await inspect.then(
      () => false,
      (error: unknown) => (error as { statusCode?: unknown }).statusCode === 404,
    )
  } catch {
    // An engine this process cannot reach: the create that follows says so.
    return undefined
  }
  if (!missing) return undefined
  const found = await dockerCliCredential(image, env)
  return found ? { [found.registry]: found.credential } : undefined
}
