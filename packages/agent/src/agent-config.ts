import { readFileSync, unlinkSync, writeSync } from 'node:fs'
import { isAbsolute } from 'node:path'
import { MIN_AGENT_SECRET_LENGTH } from '@cordon/core/backend'
import type { SealRoot } from './output-seal.js'
import { RESUME_LINE_MARK } from './protocol/resume-line.js'

/**
 * The agent is configured only through `CORDON_AGENT_*` environment variables.
 * {@link readAgentConfig} removes every one of them from the environment it
 * was given, and commands never inherit the agent's environment anyway (each
 * exec carries its complete environment), so nothing that configures the
 * agent, the secret above all, reaches a command.
 */

export type AgentListenAddress =
  /** The agent's own stdin and stdout, carrying a stream multiplexer (a container's attached stdio). */
  | { readonly kind: 'stdio' }
  | { readonly kind: 'unix'; readonly path: string; readonly mode: number }
  | { readonly kind: 'fd'; readonly fd: number }
  | { readonly kind: 'tcp'; readonly host: string; readonly port: number }

export type AgentSecretSource =
  | { readonly kind: 'value'; readonly value: string }
  | { readonly kind: 'file'; readonly path: string }
  /**
   * The first line on stdin, before the multiplexer starts (`stdio` only).
   * Nothing else in the sandbox can read it there, where an environment
   * variable would stay readable in `/proc/<pid>/environ`, which some
   * runtimes (gVisor among them) show to every user.
   */
  | { readonly kind: 'stdin' }

export interface AgentConfig {
  readonly listen: AgentListenAddress
  readonly secret: AgentSecretSource
  /** Directories the host may write files under; the first is the default working directory. */
  readonly writeRoots: readonly string[]
  /** Directories the host may read files from (the write roots are always included). */
  readonly readRoots: readonly string[]
  /** Executable run on every resume signal; its stdout is mixed into the nonce generator. */
  readonly reseedHook: string | undefined
  /** Raise each command's OOM score so the kernel picks it, not the agent, under memory pressure. */
  readonly protectFromOom: boolean
  /**
   * The user commands run as, and file operations act as. Set, the agent runs
   * as root with only the capabilities to become that user and to signal its
   * processes, and it hands every file operation to a worker process running
   * as that user, so the host never reads or writes with more rights than the
   * sandbox has.
   */
  readonly runAs: { readonly uid: number; readonly gid: number } | undefined
  /**
   * Host-visible directories (writable host mounts) the agent makes safe for
   * other tools when it ends: the sandbox user's processes are killed, then
   * FIFOs, sockets and links that resolve out are removed, set-id bits
   * cleared, and what the user owns handed to the directory's owner or to
   * the owner named for it (see output-seal.ts). Needs `runAs`, and the
   * agent to hold CAP_DAC_OVERRIDE, CAP_FOWNER and CAP_CHOWN.
   */
  readonly sealRoots: readonly SealRoot[]
  /**
   * Writable directories with a cap on the disk they take (storage-watch.ts):
   * past it, the agent kills the sandbox's processes and ends. Needs `runAs`.
   */
  readonly storageCaps: readonly StorageCap[]
  /**
   * Directories whose whole tree the agent hands to `runAs` before the
   * sandbox starts (tree-owner.ts): a persistent volume an earlier sandbox,
   * of another uid, wrote. Needs `runAs`, and the agent to hold CAP_CHOWN
   * and CAP_DAC_OVERRIDE.
   */
  readonly ownRoots: readonly string[]
  /** How often the agent measures the capped directories while the sandbox's user has processes. */
  readonly storageCheckMs: number
  /**
   * With `stdio`: a second, direct listener for the host's command and file streams, a
   * unix socket (mode 0600, root's) in a directory only root may enter. It
   * carries bulk bytes past the engine's attach stream where the host can
   * reach the container's filesystem (a local engine, runc); every
   * connection on it authenticates as on any other listener.
   */
  readonly directSocket: string | undefined
  /**
   * A second socket like {@link directSocket}, on a directory the host sees
   * (gVisor: a host-backed mount, with gVisor allowed to create host sockets
   * there), so that the host reaches the agent without the engine. Closed
   * while the session is suspended for a memory snapshot (gVisor cannot
   * save a socket bound on the host) and opened again on resume.
   */
  readonly hostSocket: string | undefined
  /** With `stdio`: a loopback port whose connections go to the host as `egress` streams. */
  readonly egressPort: number | undefined
  /** The agent exits this long after it started: a lifetime the host's death cannot stop. */
  readonly lifetimeMs: number | undefined
  /**
   * With `stdio`: the host closing the channel does not end the agent. It
   * serves the direct socket (required) until its lifetime (required) ends
   * it, so that another host process holding the secret can reach it again
   * (a detached sandbox).
   */
  readonly detached: boolean
  /**
   * cordon-launcher, the native program that starts commands with vfork()
   * (launcher-client.ts); unset, or if it cannot start, commands start with
   * Node's spawn, which behaves the same and costs a few milliseconds more.
   */
  readonly launcher: string | undefined
  /**
   * The agent's pipes to the launcher that started it (`cordon-launcher
   * --agent`, which sets this): descriptors for frames to it and lines from
   * it. Used instead of starting a launcher, whether or not {@link launcher}
   * is set; if it cannot be, the agent starts its own from {@link launcher}
   * (or, with none named, uses Node's spawn).
   */
  readonly parentLauncher: { readonly requestFd: number; readonly replyFd: number } | undefined
  /**
   * How many threads libuv's pool gets (its default is 4), set before the
   * agent first uses it. Each identity switch of a file operation
   * (user-identity.ts) is broadcast by glibc to every thread of the process,
   * which under gVisor's ptrace platform costs a few system calls per thread;
   * a backend that runs the agent there asks for fewer (gvisor-agent-threads.ts
   * in the Docker backend). Unset: libuv's own default.
   */
  readonly poolThreads: number | undefined
  readonly log: (
    level: 'info' | 'warn' | 'error',
    message: string,
    fields?: Record<string, unknown>,
  ) => void
}

export const AGENT_ENV = {
  listen: 'CORDON_AGENT_LISTEN',
  secret: 'CORDON_AGENT_SECRET',
  secretFile: 'CORDON_AGENT_SECRET_FILE',
  secretStdin: 'CORDON_AGENT_SECRET_STDIN',
  writeRoots: 'CORDON_AGENT_WRITE_ROOTS',
  readRoots: 'CORDON_AGENT_READ_ROOTS',
  socketMode: 'CORDON_AGENT_SOCKET_MODE',
  reseedHook: 'CORDON_AGENT_RESEED_HOOK',
  protectFromOom: 'CORDON_AGENT_PROTECT_FROM_OOM',
  quiet: 'CORDON_AGENT_QUIET',
  runAs: 'CORDON_AGENT_RUN_AS',
  egressPort: 'CORDON_AGENT_EGRESS_PORT',
  directSocket: 'CORDON_AGENT_DIRECT_SOCKET',
  hostSocket: 'CORDON_AGENT_HOST_SOCKET',
  lifetimeMs: 'CORDON_AGENT_LIFETIME_MS',
  detached: 'CORDON_AGENT_DETACHED',
  sealRoots: 'CORDON_AGENT_SEAL_ROOTS',
  handOver: 'CORDON_AGENT_HAND_OVER',
  storageCaps: 'CORDON_AGENT_STORAGE_CAPS',
  storageCheckMs: 'CORDON_AGENT_STORAGE_CHECK_MS',
  ownRoots: 'CORDON_AGENT_OWN_ROOTS',
  launcher: 'CORDON_AGENT_LAUNCHER',
  parentLauncher: 'CORDON_AGENT_LAUNCHER_FDS',
  poolThreads: 'CORDON_AGENT_POOL_THREADS',
} as const

/** A directory and the most disk, in bytes, it may take. */
export interface StorageCap {
  readonly root: string
  readonly bytes: number
}

export const DEFAULT_STORAGE_CHECK_MS = 100

export const DEFAULT_WRITE_ROOT = '/mnt/user-data/outputs'

/** The agent cannot start with this configuration. */
export class AgentConfigError extends Error {
  constructor(message: string) {
    super(message)
    this.name = 'AgentConfigError'
  }
}

/** Parses the agent's configuration from `env` and scrubs every `CORDON_AGENT_*` variable from it. */
export function readAgentConfig(env: Record<string, string | undefined>): AgentConfig {
  const get = (name: string): string | undefined => {
    const value = env[name]
    return value === undefined || value === '' ? undefined : value
  }
  const problems: string[] = []
  const listenText = get(AGENT_ENV.listen)
  let listen: AgentListenAddress | undefined
  if (!listenText)
    problems.push(`${AGENT_ENV.listen} is required (stdio, unix:/path, fd:3 or tcp:host:port)`)
  else {
    try {
      listen = parseListenAddress(listenText, get(AGENT_ENV.socketMode))
    } catch (error) {
      problems.push((error as Error).message)
    }
  }

  const secretValue = get(AGENT_ENV.secret)
  const secretFile = get(AGENT_ENV.secretFile)
  const secretStdin = get(AGENT_ENV.secretStdin) === '1'
  let secret: AgentSecretSource | undefined
  if ([secretValue, secretFile, secretStdin || undefined].filter(Boolean).length > 1)
    problems.push(
      `give one of ${AGENT_ENV.secret}, ${AGENT_ENV.secretFile} and ${AGENT_ENV.secretStdin}`,
    )
  else if (secretStdin) {
    if (listen && listen.kind !== 'stdio')
      problems.push(`${AGENT_ENV.secretStdin} needs ${AGENT_ENV.listen}=stdio`)
    secret = { kind: 'stdin' }
  } else if (secretValue) {
    if (secretValue.length < MIN_AGENT_SECRET_LENGTH)
      problems.push(`${AGENT_ENV.secret} must be at least ${MIN_AGENT_SECRET_LENGTH} characters`)
    secret = { kind: 'value', value: secretValue }
  } else if (secretFile) {
    if (!isAbsolute(secretFile)) problems.push(`${AGENT_ENV.secretFile} must be an absolute path`)
    secret = { kind: 'file', path: secretFile }
  } else
    problems.push(
      `${AGENT_ENV.secret}, ${AGENT_ENV.secretFile} or ${AGENT_ENV.secretStdin} is required: the agent never runs unauthenticated`,
    )

  const writeRoots = parseRoots(
    get(AGENT_ENV.writeRoots) ?? DEFAULT_WRITE_ROOT,
    AGENT_ENV.writeRoots,
    problems,
  )
  const readRoots = parseRoots(get(AGENT_ENV.readRoots) ?? '', AGENT_ENV.readRoots, problems)
  const reseedHook = get(AGENT_ENV.reseedHook)
  if (reseedHook && !isAbsolute(reseedHook))
    problems.push(`${AGENT_ENV.reseedHook} must be an absolute path`)
  const protectFromOom = get(AGENT_ENV.protectFromOom) !== '0'
  const quiet = get(AGENT_ENV.quiet) === '1'
  const runAsText = get(AGENT_ENV.runAs)
  let runAs: AgentConfig['runAs']
  if (runAsText) {
    const match = /^(\d+):(\d+)$/.exec(runAsText)
    const uid = Number(match?.[1])
    const gid = Number(match?.[2])
    if (!match || uid === 0 || gid === 0 || uid > 0x7fffffff || gid > 0x7fffffff)
      problems.push(`${AGENT_ENV.runAs} must be "uid:gid" of a user other than root`)
    else runAs = { uid, gid }
  }
  const egressPort = optionalInteger(
    get(AGENT_ENV.egressPort),
    AGENT_ENV.egressPort,
    0,
    65535,
    problems,
  )
  if (egressPort !== undefined && listen && listen.kind !== 'stdio')
    problems.push(`${AGENT_ENV.egressPort} needs ${AGENT_ENV.listen}=stdio`)
  const directSocket = get(AGENT_ENV.directSocket)
  if (directSocket !== undefined && !isAbsolute(directSocket))
    problems.push(`${AGENT_ENV.directSocket} must be an absolute path`)
  if (directSocket !== undefined && listen && listen.kind !== 'stdio')
    problems.push(`${AGENT_ENV.directSocket} needs ${AGENT_ENV.listen}=stdio`)
  const hostSocket = get(AGENT_ENV.hostSocket)
  if (hostSocket !== undefined && !isAbsolute(hostSocket))
    problems.push(`${AGENT_ENV.hostSocket} must be an absolute path`)
  if (hostSocket !== undefined && listen && listen.kind !== 'stdio')
    problems.push(`${AGENT_ENV.hostSocket} needs ${AGENT_ENV.listen}=stdio`)
  const sealPaths = parseRoots(get(AGENT_ENV.sealRoots) ?? '', AGENT_ENV.sealRoots, problems)
  if (sealPaths.length > 0 && !runAs)
    problems.push(
      `${AGENT_ENV.sealRoots} needs ${AGENT_ENV.runAs}: it hands over what that user left`,
    )
  const handOver = parseHandOver(get(AGENT_ENV.handOver) ?? '', problems)
  for (const root of handOver.keys())
    if (!sealPaths.includes(root))
      problems.push(`${AGENT_ENV.handOver}: ${root} is not one of ${AGENT_ENV.sealRoots}`)
  const sealRoots: SealRoot[] = sealPaths.map((root) => {
    const to = handOver.get(root)
    return to ? { root, handOverTo: to } : { root }
  })
  const storageCaps = parseStorageCaps(get(AGENT_ENV.storageCaps) ?? '', problems)
  if (storageCaps.length > 0 && !runAs)
    problems.push(
      `${AGENT_ENV.storageCaps} needs ${AGENT_ENV.runAs}: it measures as the sandbox's user`,
    )
  const ownRoots = parseRoots(get(AGENT_ENV.ownRoots) ?? '', AGENT_ENV.ownRoots, problems)
  if (ownRoots.length > 0 && !runAs)
    problems.push(`${AGENT_ENV.ownRoots} needs ${AGENT_ENV.runAs}: it hands the trees to that user`)
  const storageCheckMs =
    optionalInteger(
      get(AGENT_ENV.storageCheckMs),
      AGENT_ENV.storageCheckMs,
      10,
      60_000,
      problems,
    ) ?? DEFAULT_STORAGE_CHECK_MS
  const lifetimeMs = optionalInteger(
    get(AGENT_ENV.lifetimeMs),
    AGENT_ENV.lifetimeMs,
    1,
    2_147_483_647,
    problems,
  )
  const detached = get(AGENT_ENV.detached) === '1'
  if (detached && (directSocket === undefined || lifetimeMs === undefined))
    problems.push(
      `${AGENT_ENV.detached} needs ${AGENT_ENV.directSocket} (how a host reaches it again) and ${AGENT_ENV.lifetimeMs} (so that it ends)`,
    )

  const launcher = get(AGENT_ENV.launcher)
  if (launcher !== undefined && !isAbsolute(launcher))
    problems.push(`${AGENT_ENV.launcher} must be an absolute path`)
  const launcherFds = get(AGENT_ENV.parentLauncher)
  const launcherFdMatch = launcherFds === undefined ? null : /^(\d+),(\d+)$/.exec(launcherFds)
  if (launcherFds !== undefined && !launcherFdMatch)
    problems.push(
      `${AGENT_ENV.parentLauncher} must be two descriptor numbers, "<requests>,<replies>"`,
    )
  const parentLauncher = launcherFdMatch
    ? { requestFd: Number(launcherFdMatch[1]), replyFd: Number(launcherFdMatch[2]) }
    : undefined

  const poolThreads = optionalInteger(
    get(AGENT_ENV.poolThreads),
    AGENT_ENV.poolThreads,
    1,
    1024,
    problems,
  )

  for (const name of Object.keys(env)) if (name.startsWith('CORDON_AGENT_')) delete env[name]

  if (problems.length > 0 || !listen || !secret) {
    throw new AgentConfigError(`invalid agent configuration:\n  - ${problems.join('\n  - ')}`)
  }
  return {
    listen,
    secret,
    writeRoots,
    readRoots: [...new Set([...writeRoots, ...readRoots])],
    reseedHook,
    protectFromOom,
    runAs,
    sealRoots,
    storageCaps,
    ownRoots,
    storageCheckMs,
    directSocket,
    hostSocket,
    egressPort,
    lifetimeMs,
    detached,
    launcher,
    parentLauncher,
    poolThreads,
    log: quiet ? () => {} : writeLogLine,
  }
}

function optionalInteger(
  text: string | undefined,
  name: string,
  min: number,
  max: number,
  problems: string[],
): number | undefined {
  if (text === undefined) return undefined
  const value = Number(text)
  if (!Number.isInteger(value) || value < min || value > max) {
    problems.push(`${name} must be an integer from ${min} to ${max}`)
    return undefined
  }
  return value
}

function parseListenAddress(text: string, socketMode: string | undefined): AgentListenAddress {
  if (text === 'stdio') return { kind: 'stdio' }
  if (text.startsWith('unix:')) {
    const path = text.slice('unix:'.length)
    if (!isAbsolute(path))
      throw new AgentConfigError(`${AGENT_ENV.listen}: the unix socket path must be absolute`)
    const mode = socketMode === undefined ? 0o600 : Number.parseInt(socketMode, 8)
    if (!Number.isInteger(mode) || mode < 0 || mode > 0o777) {
      throw new AgentConfigError(`${AGENT_ENV.socketMode} must be octal permission bits, e.g. 600`)
    }
    return { kind: 'unix', path, mode }
  }
  if (text.startsWith('fd:')) {
    const fd = Number(text.slice(3))
    if (!Number.isInteger(fd) || fd < 3)
      throw new AgentConfigError(`${AGENT_ENV.listen}: fd must be an integer of at least 3`)
    return { kind: 'fd', fd }
  }
  if (text.startsWith('tcp:')) {
    const rest = text.slice(4)
    const colon = rest.lastIndexOf(':')
    const host = rest.slice(0, colon).replace(/^\[(.*)\]$/, '$1')
    const port = Number(rest.slice(colon + 1))
    if (colon <= 0 || !host)
      throw new AgentConfigError(
        `${AGENT_ENV.listen}: tcp needs an explicit host, e.g. tcp:10.0.0.4:7070`,
      )
    if (!Number.isInteger(port) || port < 0 || port > 65535)
      throw new AgentConfigError(`${AGENT_ENV.listen}: bad tcp port`)
    return { kind: 'tcp', host, port }
  }
  throw new AgentConfigError(`${AGENT_ENV.listen} must be stdio or start with unix:, fd: or tcp:`)
}

/** `root=bytes` entries separated by `:`, as the roots are; a root may itself hold `=`. */
function parseStorageCaps(text: string, problems: string[]): StorageCap[] {
  const caps: StorageCap[] = []
  for (const entry of text.split(':').filter(Boolean)) {
    const at = entry.lastIndexOf('=')
    const root = entry.slice(0, at)
    const bytes = Number(entry.slice(at + 1))
    if (at <= 0 || !isAbsolute(root) || !Number.isSafeInteger(bytes) || bytes <= 0) {
      problems.push(`${AGENT_ENV.storageCaps}: "${entry}" is not "/absolute/path=bytes"`)
      continue
    }
    caps.push({ root: root.length > 1 ? root.replace(/\/+$/, '') : root, bytes })
  }
  return caps
}

/** `root=uid,gid` entries separated by `:`: who gets what the sandbox left in that root. */
function parseHandOver(
  text: string,
  problems: string[],
): Map<string, { uid: number; gid: number }> {
  const owners = new Map<string, { uid: number; gid: number }>()
  for (const entry of text.split(':').filter(Boolean)) {
    const at = entry.lastIndexOf('=')
    const root = entry.slice(0, at)
    const ids = /^(\d+),(\d+)$/.exec(entry.slice(at + 1))
    const uid = Number(ids?.[1])
    const gid = Number(ids?.[2])
    if (at <= 0 || !isAbsolute(root) || !ids || uid > 0xfffffffe || gid > 0xfffffffe) {
      problems.push(`${AGENT_ENV.handOver}: "${entry}" is not "/absolute/path=uid,gid"`)
      continue
    }
    owners.set(root.length > 1 ? root.replace(/\/+$/, '') : root, { uid, gid })
  }
  return owners
}

function parseRoots(text: string, name: string, problems: string[]): string[] {
  const roots = text.split(':').filter(Boolean)
  for (const root of roots)
    if (!isAbsolute(root)) problems.push(`${name}: "${root}" is not an absolute path`)
  return roots.map((root) => (root.length > 1 ? root.replace(/\/+$/, '') : root))
}

/** Reads the secret; a secret file is removed once read so nothing else in the guest finds it there. */
export function loadSecret(
  source: Exclude<AgentSecretSource, { kind: 'stdin' }>,
  log: AgentConfig['log'],
): string | undefined {
  if (source.kind === 'value') return source.value
  let text: string
  try {
    text = readFileSync(source.path, 'utf8').trim()
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === 'ENOENT') return undefined
    throw error
  }
  try {
    unlinkSync(source.path)
  } catch (error) {
    log('warn', 'could not remove the secret file after reading it', {
      code: (error as NodeJS.ErrnoException).code,
    })
  }
  if (text.length < MIN_AGENT_SECRET_LENGTH)
    throw new AgentConfigError(
      `the secret file holds fewer than ${MIN_AGENT_SECRET_LENGTH} characters`,
    )
  return text
}

function writeLogLine(level: string, message: string, fields: Record<string, unknown> = {}): void {
  const line = `${JSON.stringify({ time: new Date().toISOString(), level, message, ...fields })}\n`
  // Straight to the descriptor: building process.stderr costs milliseconds of
  // start-up, and Node writes to a pipe or file synchronously anyway. A
  // descriptor someone made non-blocking may refuse (EAGAIN): the stream then
  // queues the line.
  let bytes = Buffer.from(line)
  try {
    while (bytes.length > 0) bytes = bytes.subarray(writeSync(2, bytes))
  } catch {
    process.stderr.write(bytes)
  }
}

/** The longest secret line read from stdin; anything longer is not a secret cordon sent. */
const MAX_SECRET_LINE = 1024

/**
 * Reads the secret line from the start of `input` and leaves the bytes after
 * it unread for whoever reads `input` next.
 */
export function readSecretLine(
  input: NodeJS.ReadableStream & { unshift(chunk: Buffer): void },
): Promise<string> {
  return new Promise((resolve, reject) => {
    let buffered = Buffer.alloc(0)
    const finish = (error: Error | undefined, secret?: string) => {
      input.off('readable', onReadable)
      input.off('end', onEnd)
      input.off('error', onError)
      if (error) reject(error)
      else resolve(secret!)
    }
    const onEnd = () => finish(new AgentConfigError('stdin ended before the secret line'))
    const onError = (error: Error) => finish(error)
    const onReadable = () => {
      for (
        let chunk = input.read() as Buffer | null;
        chunk;
        chunk = input.read() as Buffer | null
      ) {
        buffered = Buffer.concat([buffered, chunk])
        const newline = buffered.indexOf(0x0a)
        if (newline === -1) {
          if (buffered.length > MAX_SECRET_LINE)
            return finish(new AgentConfigError('the secret line on stdin is too long'))
          continue
        }
        const rest = buffered.subarray(newline + 1)
        if (rest.length > 0) input.unshift(rest)
        const secret = buffered.subarray(0, newline).toString('utf8').trim()
        if (secret.length < MIN_AGENT_SECRET_LENGTH)
          return finish(
            new AgentConfigError(
              `the secret line holds fewer than ${MIN_AGENT_SECRET_LENGTH} characters`,
            ),
          )
        return finish(undefined, secret)
      }
    }
    input.on('readable', onReadable)
    input.on('end', onEnd)
    input.on('error', onError)
    onReadable()
  })
}

/** What the host sends on stdin to continue a suspended stdio agent. */
export interface ResumeLine {
  /** The secret in force from now on; the one before is refused. */
  readonly secret: string
  /** The lifetime counted from now (`null`: none), replacing the running one; undefined keeps it. */
  readonly lifetimeMs: number | null | undefined
}

/**
 * Reads the resume line (`cordon-resume:{"secret":…,"lifetimeMs":…}\n`)
 * from `input` and leaves the bytes after it unread, for the new session.
 * Anything before the mark is what the old session's peer wrote after the
 * agent stopped reading it, and is dropped.
 */
export function readResumeLine(
  input: NodeJS.ReadableStream & { unshift(chunk: Buffer): void },
  signal?: AbortSignal,
): Promise<ResumeLine> {
  const mark = Buffer.from(RESUME_LINE_MARK, 'utf8')
  // 'data' events rather than 'readable': process.stdin paused after
  // flowing (the session before) stops reading its pipe, and a 'readable'
  // listener added then is not always woken again.
  return new Promise((resolve, reject) => {
    let buffered = Buffer.alloc(0)
    const finish = (error: Error | undefined, line?: ResumeLine, rest?: Buffer) => {
      signal?.removeEventListener('abort', onAbort)
      input.off('data', onData)
      input.off('end', onEnd)
      input.off('error', onError)
      input.pause()
      if (rest && rest.length > 0) input.unshift(rest)
      if (error) reject(error)
      else resolve(line!)
    }
    const onEnd = () => finish(new AgentConfigError('the input ended before the resume line'))
    const onAbort = () => finish(new AgentConfigError('no longer waiting for a resume line here'))
    signal?.addEventListener('abort', onAbort, { once: true })
    const onError = (error: Error) => finish(error)
    const onData = (chunk: Buffer) => {
      buffered = Buffer.concat([buffered, chunk])
      const start = buffered.indexOf(mark)
      if (start === -1) {
        // Keep only what could be the start of a mark split across reads.
        buffered = buffered.subarray(Math.max(0, buffered.length - mark.length))
        return
      }
      const newline = buffered.indexOf(0x0a, start)
      if (newline === -1) {
        if (buffered.length - start > MAX_SECRET_LINE)
          finish(new AgentConfigError('the resume line on stdin is too long'))
        return
      }
      const rest = buffered.subarray(newline + 1)
      let parsed: { secret?: unknown; lifetimeMs?: unknown }
      try {
        parsed = JSON.parse(buffered.subarray(start + mark.length, newline).toString('utf8'))
      } catch {
        return finish(new AgentConfigError('the resume line is not JSON'))
      }
      const { secret, lifetimeMs } = parsed
      if (typeof secret !== 'string' || secret.length < MIN_AGENT_SECRET_LENGTH)
        return finish(
          new AgentConfigError(
            `the resume line's secret holds fewer than ${MIN_AGENT_SECRET_LENGTH} characters`,
          ),
        )
      if (
        lifetimeMs !== undefined &&
        lifetimeMs !== null &&
        (typeof lifetimeMs !== 'number' || !Number.isInteger(lifetimeMs) || lifetimeMs < 1)
      )
        return finish(
          new AgentConfigError("the resume line's lifetimeMs is not a positive integer"),
        )
      finish(undefined, { secret, lifetimeMs }, rest)
    }
    input.on('data', onData)
    input.on('end', onEnd)
    input.on('error', onError)
    input.resume()
  })
}
