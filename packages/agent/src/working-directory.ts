import { mkdirSync, type Stats, statSync } from 'node:fs'
import { AgentOperationError } from './operation-error.js'
import { type PathJail, PathRefusedError } from './path-jail.js'
import type { FramedConnection } from './protocol/framed-connection.js'
import type { MakeDirectoryRequest } from './protocol/messages.js'

/**
 * Makes sure `path` is a directory a command can start in, as `mkdir -p`
 * would before the command: one that exists is left as it is, wherever it is
 * (a command may run in `/tmp`); one that is missing is created acting as the
 * sandbox's user, and only inside the write roots, so a host cannot make
 * directories where the sandbox could not. Returns whether it made one.
 *
 * The first `stat` runs as the agent itself and is the only system call a
 * directory that already exists costs: the exec round trip is a hot path.
 */
export function ensureWorkingDirectory(jail: PathJail, path: string): boolean {
  const existing = statOrUndefined(path)
  if (existing) {
    if (existing.isDirectory()) return false
    throw new AgentOperationError('bad-cwd', `working directory ${path} is not a directory`)
  }
  jail.actAs(() => {
    try {
      jail.resolveForWrite(path)
    } catch (error) {
      if (!(error instanceof PathRefusedError)) throw error
      throw new PathRefusedError(
        path,
        `the working directory does not exist, and it is outside the write roots (${jail.writeRoots.join(', ') || 'none'}) where it could be created`,
      )
    }
    try {
      mkdirSync(path, { recursive: true, mode: 0o755 })
    } catch (error) {
      const code = (error as NodeJS.ErrnoException).code
      if (code === 'ENOTDIR' || code === 'EEXIST')
        throw new AgentOperationError(
          'bad-cwd',
          `working directory ${path} cannot be created: a part of it is not a directory`,
        )
      if (code === 'EACCES' || code === 'EPERM' || code === 'EROFS')
        throw new PathRefusedError(
          path,
          `the working directory cannot be created by the sandbox's user (${code})`,
        )
      throw error
    }
    // What was just made must still lead inside the roots (a link swapped in meanwhile).
    jail.resolveForWrite(path)
  })
  return true
}

function statOrUndefined(path: string): Stats | undefined {
  try {
    return statSync(path, { throwIfNoEntry: false })
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === 'ENOTDIR')
      throw new AgentOperationError(
        'bad-cwd',
        `working directory ${path} cannot exist: a part of it is not a directory`,
      )
    throw error
  }
}

/**
 * The file API's `makeDirectory`: like {@link ensureWorkingDirectory}, but
 * the path must lie inside the write roots even when it exists already, and
 * something there that is not a directory is an error of the request.
 */
export function makeDirectoryInRoots(jail: PathJail, path: string, mode = 0o755): boolean {
  return jail.actAs(() => {
    const real = jail.resolveForWrite(path)
    let existing: Stats | undefined
    try {
      existing = statSync(real, { throwIfNoEntry: false })
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code !== 'ENOTDIR') throw error
      throw new AgentOperationError('bad-request', `${path}: a part of it is not a directory`)
    }
    if (existing) {
      if (existing.isDirectory()) return false
      throw new AgentOperationError('bad-request', `${path} exists and is not a directory`)
    }
    try {
      mkdirSync(real, { recursive: true, mode })
    } catch (error) {
      const code = (error as NodeJS.ErrnoException).code
      if (code === 'ENOTDIR' || code === 'EEXIST')
        throw new AgentOperationError('bad-request', `${path}: a part of it is not a directory`)
      throw error
    }
    // What was just made must still lead inside the roots (a link swapped in meanwhile).
    jail.resolveForWrite(path)
    return true
  })
}

/** Answers a `make-directory` request: the directory exists when `directory-ok` is sent. */
export async function serveMakeDirectory(
  connection: FramedConnection,
  request: MakeDirectoryRequest,
  jail: PathJail,
): Promise<void> {
  const created = request.strict
    ? makeDirectoryInRoots(jail, request.path, request.mode)
    : ensureWorkingDirectory(jail, request.path)
  await connection.send({ type: 'directory-ok', created })
}
