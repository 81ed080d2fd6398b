import { type Dirent, type FSWatcher, lstatSync, readdirSync, type Stats, watch } from 'node:fs'
import { join, resolve, sep } from 'node:path'
import { AgentOperationError } from './operation-error.js'
import type { PathJail } from './path-jail.js'
import type { FramedConnection } from './protocol/framed-connection.js'
import type { FileChangeMessage, WatchRequest } from './protocol/messages.js'

/** Directories one watch may follow; past it the watch ends with an error rather than go blind. */
export const MAX_WATCHED_DIRECTORIES = 4_096
/** How long changes gather before they are reconciled and sent: a move's two halves arrive together. */
const SETTLE_MS = 25
/**
 * Batches sent and not yet taken by the connection; past this the host is
 * not keeping up (or not reading), and the watch ends rather than hold an
 * unbounded backlog in the sandbox's memory.
 */
const MAX_UNSENT_BATCHES = 256
/** The temporary files of the agent's own uploads (file-write.ts): a write shows as its target changing. */
const UPLOAD_TEMPORARY = /^\..+\.[0-9a-f]{12}\.cordon-upload$/

interface KnownEntry {
  readonly dev: number
  readonly ino: number
  /** Birth time (0 where the file system keeps none, as under gVisor). */
  readonly bornMs: number
  readonly directory: boolean
  readonly mtimeMs: number
}

/**
 * What a move keeps and a new entry does not share: the file system and
 * inode (inode numbers repeat across mounts), the kind, and the birth time,
 * for a file system such as ext4 hands a freed inode to the next entry made
 * at once. (Without birth times, an entry made in the same moment another
 * went can still take its inode and be reported as its move.)
 */
function identityOf(entry: KnownEntry): string {
  return `${entry.dev}:${entry.ino}:${entry.directory ? 'd' : 'f'}:${entry.bornMs}`
}

function knownEntry(info: Stats): KnownEntry {
  return {
    dev: info.dev,
    ino: info.ino,
    bornMs: info.birthtimeMs,
    directory: info.isDirectory(),
    mtimeMs: info.mtimeMs,
  }
}

/**
 * Follows the changes under one directory with the kernel's inotify (through
 * `fs.watch`, one watch per directory: Node's own recursive mode would add
 * the watches of subdirectories as root, outside the jail's identity
 * switch). inotify reports names, not what happened to them, so each batch
 * of names is reconciled against what the watch knew of them: a name that
 * appeared is `created`, one that went is `removed`, a name that went and
 * another that appeared with the same inode are one `renamed`, and a file
 * whose content or inode changed in place is `modified`. Every directory is
 * read and watched acting as the sandbox's user, and links are never
 * followed (a link is an entry like any other).
 *
 * A directory made inside the tree is watched only once its batch is
 * reconciled, so a move into it before then has no arriving half: reading
 * the new directory finds the entry, and an entry whose inode the watch
 * knew under a name that no longer holds it was moved, not made (its
 * leaving half may come in this batch or the next; either way it is one
 * `renamed`).
 *
 * Under gVisor the sentry implements inotify itself and sees every change
 * made inside the sandbox; a change made to a host directory from outside
 * the sandbox is not seen there (nor reported by this watch).
 */
export class DirectoryWatch {
  private readonly watchers = new Map<string, FSWatcher>()
  private readonly known = new Map<string, KnownEntry>()
  /** The names the watch knows each inode by (more than one for hard links). */
  private readonly namesByIdentity = new Map<string, Set<string>>()
  private readonly pending = new Map<string, boolean>()
  private timer: ReturnType<typeof setTimeout> | undefined
  private stopped = false

  constructor(
    private readonly jail: PathJail,
    private readonly realRoot: string,
    private readonly shownRoot: string,
    private readonly recursive: boolean,
    private readonly emit: (events: FileChangeMessage[]) => void,
    private readonly fail: (error: unknown) => void,
  ) {}

  /** Puts the watches in place; throws if the kernel refuses the first one. */
  start(): void {
    this.jail.actAs(() => this.addDirectory(this.realRoot, undefined))
  }

  stop(): void {
    this.stopped = true
    if (this.timer) clearTimeout(this.timer)
    for (const watcher of this.watchers.values()) watcher.close()
    this.watchers.clear()
  }

  /**
   * Call acting as the sandbox's user. With `found`, each entry the
   * directory holds already is told to it (they were made, or moved in,
   * before its watch); it answers whether the entry was moved in, and a
   * moved directory's own entries came with it, so they are not told.
   */
  private addDirectory(
    directory: string,
    found: ((path: string, entry: KnownEntry) => 'moved' | 'made') | undefined,
  ): void {
    if (this.watchers.has(directory)) return
    if (this.watchers.size >= MAX_WATCHED_DIRECTORIES)
      throw new AgentOperationError(
        'io-error',
        `the watch would follow more than ${MAX_WATCHED_DIRECTORIES} directories`,
      )
    // Synchronous: the kernel's watch is added here, under the caller's identity.
    const watcher = watch(directory, { persistent: false }, (type, name) => {
      if (typeof name !== 'string' || name.length === 0) return
      this.note(join(directory, name), type === 'change')
    })
    watcher.on('error', (error) => this.fail(error))
    this.watchers.set(directory, watcher)
    let children: Dirent[]
    try {
      children = readdirSync(directory, { withFileTypes: true })
    } catch {
      return
    }
    for (const child of children) {
      if (UPLOAD_TEMPORARY.test(child.name)) continue
      const path = join(directory, child.name)
      const info = lstatSync(path, { throwIfNoEntry: false })
      if (!info) continue
      const entry = knownEntry(info)
      const how = found?.(path, entry)
      this.remember(path, entry)
      if (this.recursive && entry.directory)
        this.addDirectory(path, how === 'moved' ? undefined : found)
    }
  }

  private note(path: string, contentChanged: boolean): void {
    if (this.stopped) return
    this.pending.set(path, (this.pending.get(path) ?? false) || contentChanged)
    this.timer ??= setTimeout(() => {
      this.timer = undefined
      try {
        const events = this.jail.actAs(() => this.reconcile())
        if (events.length > 0) this.emit(events)
      } catch (error) {
        this.fail(error)
      }
    }, SETTLE_MS)
  }

  private reconcile(): FileChangeMessage[] {
    const batch = [...this.pending]
    this.pending.clear()
    const gone = new Map<string, { path: string; entry: KnownEntry }>()
    const arrived: Array<{ path: string; entry: KnownEntry; replaced: boolean }> = []
    const events: FileChangeMessage[] = []
    for (const [path, contentChanged] of batch) {
      if (UPLOAD_TEMPORARY.test(path.slice(path.lastIndexOf(sep) + 1))) continue
      const before = this.known.get(path)
      const info = lstatSync(path, { throwIfNoEntry: false })
      const now = info && knownEntry(info)
      if (before && !now) {
        gone.set(identityOf(before), { path, entry: before })
        this.forget(path, before)
      } else if (now && (!before || identityOf(before) !== identityOf(now))) {
        this.remember(path, now)
        arrived.push({ path, entry: now, replaced: before !== undefined })
      } else if (now && before && (contentChanged || before.mtimeMs !== now.mtimeMs)) {
        this.remember(path, now)
        events.push({ kind: 'modified', path: this.shown(path), directory: now.directory })
      }
    }
    /** Where an entry that appeared came from, if it was moved: this batch's leaving half, else a name no longer holding it. */
    const movedFrom = (path: string, entry: KnownEntry): string | undefined => {
      const identity = identityOf(entry)
      const left = gone.get(identity)
      if (left) {
        gone.delete(identity)
        return left.path
      }
      return this.leftUnseen(path, entry)
    }
    const report = (
      path: string,
      entry: KnownEntry,
      from: string | undefined,
      made: 'created' | 'modified',
    ): void => {
      events.push(
        from === undefined
          ? { kind: made, path: this.shown(path), directory: entry.directory }
          : {
              kind: 'renamed',
              path: this.shown(path),
              from: this.shown(from),
              directory: entry.directory,
            },
      )
    }
    // What a new directory already holds came before its watch: made there, or moved in.
    const found = (path: string, entry: KnownEntry): 'moved' | 'made' => {
      const from = movedFrom(path, entry)
      report(path, entry, from, 'created')
      return from === undefined ? 'made' : 'moved'
    }
    for (const { path, entry, replaced } of arrived) {
      const left = gone.get(identityOf(entry))
      if (left) gone.delete(identityOf(entry))
      report(path, entry, left?.path, replaced ? 'modified' : 'created')
      if (this.recursive && entry.directory) this.addDirectory(path, left ? undefined : found)
    }
    for (const { path, entry } of gone.values())
      events.push({ kind: 'removed', path: this.shown(path), directory: entry.directory })
    return events
  }

  /**
   * The name `entry` was known by before it was found at `path`, if that
   * name no longer holds it: it was moved, and the leaving half of the move
   * is still to come. That name is forgotten now, so the leaving half, when
   * it comes, reports nothing.
   */
  private leftUnseen(path: string, entry: KnownEntry): string | undefined {
    for (const name of this.namesByIdentity.get(identityOf(entry)) ?? []) {
      if (name === path) continue
      const there = lstatSync(name, { throwIfNoEntry: false })
      // Another hard link to it, still in place: `path` is a new name, not a move.
      if (there && identityOf(knownEntry(there)) === identityOf(entry)) continue
      this.forget(name, this.known.get(name)!)
      return name
    }
    return undefined
  }

  private remember(path: string, entry: KnownEntry): void {
    const before = this.known.get(path)
    if (before) this.unindex(path, before)
    this.known.set(path, entry)
    const identity = identityOf(entry)
    const names = this.namesByIdentity.get(identity)
    if (names) names.add(path)
    else this.namesByIdentity.set(identity, new Set([path]))
  }

  private unindex(path: string, entry: KnownEntry): void {
    const identity = identityOf(entry)
    const names = this.namesByIdentity.get(identity)
    names?.delete(path)
    if (names?.size === 0) this.namesByIdentity.delete(identity)
  }

  /** Drops a name, and for a directory everything the watch knew under it. */
  private forget(path: string, entry: KnownEntry): void {
    this.known.delete(path)
    this.unindex(path, entry)
    if (!entry.directory) return
    const prefix = path + sep
    for (const [directory, watcher] of this.watchers) {
      if (directory === path || directory.startsWith(prefix)) {
        watcher.close()
        this.watchers.delete(directory)
      }
    }
    for (const [known, under] of this.known) {
      if (!known.startsWith(prefix)) continue
      this.known.delete(known)
      this.unindex(known, under)
    }
  }

  private shown(real: string): string {
    return real === this.realRoot
      ? this.shownRoot
      : join(this.shownRoot, real.slice(this.realRoot.length))
  }
}

/**
 * Answers `watch`: `watching` once the watches are in place, then batches of
 * changes as `fs-events`, until the client sends `end` (answered with `end`)
 * or hangs up. A kernel that has no inotify gives `unsupported`.
 */
export async function serveWatch(
  connection: FramedConnection,
  request: WatchRequest,
  jail: PathJail,
): Promise<void> {
  const realRoot = jail.actAs(() => {
    const real = jail.resolveForRead(request.path)
    const info = lstatSync(real, { throwIfNoEntry: false })
    if (!info) throw new AgentOperationError('not-found', `no such directory: ${request.path}`)
    if (!info.isDirectory())
      throw new AgentOperationError('bad-request', `${request.path} is not a directory`)
    return real
  })
  let failure: unknown
  let wake: (() => void) | undefined
  const sending = new Set<Promise<void>>()
  const watcher = new DirectoryWatch(
    jail,
    realRoot,
    resolve(request.path),
    request.recursive,
    (events) => {
      if (sending.size >= MAX_UNSENT_BATCHES) {
        failure ??= new AgentOperationError(
          'io-error',
          'changes came faster than the host took them; the watch ended',
        )
        wake?.()
        return
      }
      const sent: Promise<void> = connection
        .send({ type: 'fs-events', events })
        .catch(() => {})
        .finally(() => sending.delete(sent))
      sending.add(sent)
    },
    (error) => {
      failure ??= error
      wake?.()
    },
  )
  try {
    watcher.start()
  } catch (error) {
    watcher.stop()
    const code = (error as NodeJS.ErrnoException).code
    if (code === 'ENOSYS' || code === 'EOPNOTSUPP' || code === 'ENOTSUP')
      throw new AgentOperationError(
        'unsupported',
        `this sandbox's kernel cannot watch files (${code})`,
      )
    if (code === 'ENOSPC' || code === 'EMFILE')
      throw new AgentOperationError(
        'io-error',
        `the kernel's limit of watches is reached (${code})`,
      )
    throw error
  }
  try {
    await connection.send({ type: 'watching' })
    const ended = (async () => {
      for (;;) {
        const frame = await connection.read()
        if (!frame) return false
        if (frame.kind === 'message' && frame.message.type === 'end') return true
      }
    })()
    const failed = new Promise<'failed'>((resolveFailed) => {
      wake = () => resolveFailed('failed')
      if (failure !== undefined) resolveFailed('failed')
    })
    const outcome = await Promise.race([ended, failed])
    watcher.stop()
    if (outcome === 'failed' && sending.size >= MAX_UNSENT_BATCHES) {
      // A host that does not read would not read the error either.
      connection.destroy(failure)
      return
    }
    await Promise.all([...sending])
    if (outcome === 'failed') throw failure
    if (outcome) await connection.send({ type: 'end' })
  } finally {
    watcher.stop()
  }
}
