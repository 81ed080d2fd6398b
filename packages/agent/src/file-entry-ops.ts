import {
  lstatSync,
  mkdirSync,
  readlinkSync,
  renameSync,
  rmdirSync,
  rmSync,
  type Stats,
  unlinkSync,
} from 'node:fs'
import { dirname, sep } from 'node:path'
import { AgentOperationError } from './operation-error.js'
import { type PathJail, PathRefusedError } from './path-jail.js'
import type { FramedConnection } from './protocol/framed-connection.js'
import type {
  FileKind,
  RemoveRequest,
  RenameRequest,
  StatOkMessage,
  StatRequest,
} from './protocol/messages.js'

/**
 * The file API's single-entry operations: stat, remove, rename. Each runs
 * its path work acting as the sandbox's user (see user-identity.ts), so it
 * can never do more than a command of the sandbox could; the jail keeps it
 * to the roots as well: a link is never followed out of them, a link itself
 * is what stat and remove see unless asked otherwise, and no root (a mount)
 * is removed or moved.
 */

export function kindOf(info: Stats): FileKind {
  if (info.isFile()) return 'file'
  if (info.isDirectory()) return 'directory'
  if (info.isSymbolicLink()) return 'symlink'
  return 'other'
}

function lstatOrNotFound(real: string, shown: string): Stats {
  try {
    return lstatSync(real)
  } catch (error) {
    const code = (error as NodeJS.ErrnoException).code
    if (code === 'ENOENT' || code === 'ENOTDIR')
      throw new AgentOperationError('not-found', `no such file or directory: ${shown}`)
    throw error
  }
}

/** Answers `stat`: the entry itself, or with `followLinks` what it leads to (which must be inside the roots). */
export async function serveStat(
  connection: FramedConnection,
  request: StatRequest,
  jail: PathJail,
): Promise<void> {
  const answer = jail.actAs((): StatOkMessage => {
    const real = request.followLinks
      ? jail.resolveForRead(request.path)
      : jail.resolveEntry(request.path, 'read')
    const info = lstatOrNotFound(real, request.path)
    const kind = kindOf(info)
    // Followed, a link that is still a link is one that leads nowhere.
    if (request.followLinks && kind === 'symlink')
      throw new AgentOperationError('not-found', `no such file or directory: ${request.path}`)
    return {
      type: 'stat-ok',
      kind,
      size: info.size,
      mode: info.mode & 0o7777,
      modifiedMs: Math.floor(info.mtimeMs),
      ...(kind === 'symlink' ? { target: readlinkSync(real) } : {}),
    }
  })
  await connection.send(answer)
}

/** Refuses a root of the jail, and anything a root lies under (removing or moving it would take a mount along). */
function refuseRootOrAncestor(jail: PathJail, real: string, shown: string, what: string): void {
  const roots = [...jail.writeRoots, ...jail.readRoots]
  if (jail.isRoot(real, roots))
    throw new PathRefusedError(
      shown,
      `it is a root of the sandbox's files (a mount) and cannot be ${what}`,
    )
  const prefix = real.endsWith(sep) ? real : real + sep
  if (roots.some((root) => root.startsWith(prefix)))
    throw new PathRefusedError(
      shown,
      `a root of the sandbox's files (a mount) lies under it; it cannot be ${what}`,
    )
}

/** Answers `remove`: a file or link (never what it leads to), an empty directory, or with `recursive` a whole tree. */
export async function serveRemove(
  connection: FramedConnection,
  request: RemoveRequest,
  jail: PathJail,
): Promise<void> {
  jail.actAs(() => {
    const real = jail.resolveEntry(request.path, 'write')
    refuseRootOrAncestor(jail, real, request.path, 'removed')
    const info = lstatOrNotFound(real, request.path)
    if (!info.isDirectory()) {
      unlinkSync(real)
      return
    }
    if (!request.recursive) {
      try {
        rmdirSync(real)
      } catch (error) {
        const code = (error as NodeJS.ErrnoException).code
        if (code === 'ENOTEMPTY' || code === 'EEXIST')
          throw new AgentOperationError(
            'not-empty',
            `${request.path} is a directory that is not empty (remove it with recursive)`,
          )
        throw error
      }
      return
    }
    // Node's recursive removal takes links as links; it acts with the user's rights only.
    rmSync(real, { recursive: true, force: false })
  })
  await connection.send({ type: 'done' })
}

/** Answers `rename`: both ends inside the write roots; missing parents of the target are made. */
export async function serveRename(
  connection: FramedConnection,
  request: RenameRequest,
  jail: PathJail,
): Promise<void> {
  jail.actAs(() => {
    const from = jail.resolveEntry(request.from, 'write')
    let to: string
    try {
      to = jail.resolveEntry(request.to, 'write')
    } catch (error) {
      // The host names the source; the reason names the target.
      if (!(error instanceof PathRefusedError)) throw error
      throw new PathRefusedError(
        request.from,
        `its new path ${request.to} is refused: ${error.reason}`,
      )
    }
    refuseRootOrAncestor(jail, from, request.from, 'moved')
    refuseRootOrAncestor(jail, to, request.to, 'replaced')
    lstatOrNotFound(from, request.from)
    const parent = dirname(to)
    mkdirSync(parent, { recursive: true, mode: 0o755 })
    // The directories just made must still lead inside the roots.
    jail.resolveForWrite(parent)
    renameSync(from, to)
  })
  await connection.send({ type: 'done' })
}
