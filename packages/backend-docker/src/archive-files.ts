import { createReadStream, createWriteStream } from 'node:fs'
import { mkdtemp, rm, stat } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join, posix } from 'node:path'
import { Readable, Transform } from 'node:stream'
import { pipeline } from 'node:stream/promises'
import {
  type SandboxByteSource,
  type SandboxFileContent,
  type SandboxFileEntry,
  SandboxFileNotFoundError,
  SandboxOperationError,
} from '@cordon/core'
import type Docker from 'dockerode'
import tar from 'tar-stream'
import { isNotFound } from './engine-errors.js'
import type { ResolvedSandboxPath } from './sandbox-paths.js'

export interface FileOwner {
  readonly uid: number
  readonly gid: number
}

/**
 * Files through the Engine archive API (tar streams), which needs nothing
 * inside the image. On Engine 20.10 the API only reaches volumes and bind
 * mounts under a read-only root filesystem, which is why every path the file
 * API accepts lies in a layout mount.
 */
export class ArchiveFiles {
  constructor(
    private readonly container: Docker.Container,
    private readonly owner: FileOwner,
  ) {}

  /**
   * Writes one file, creating missing parent directories owned by the sandbox
   * user. The tar entry carries the size up front, so bytes stream straight
   * through when the size is known; otherwise they are spooled to a temporary
   * file first, keeping host memory bounded either way.
   */
  async write(
    target: ResolvedSandboxPath,
    source: SandboxByteSource | Uint8Array,
    options: { mode?: number; size?: number; signal?: AbortSignal },
  ): Promise<void> {
    if (target.relative === '')
      throw new SandboxOperationError('writeFile', `${target.path} is a directory`)
    if (source instanceof Uint8Array) {
      await this.putSingleEntry(target, Readable.from([source]), source.byteLength, options)
      return
    }
    if (options.size !== undefined) {
      await this.putSingleEntry(target, toReadable(source), options.size, options)
      return
    }
    const spoolDir = await mkdtemp(join(tmpdir(), 'cordon-upload-'))
    const spoolFile = join(spoolDir, 'data')
    try {
      await pipeline(toReadable(source), createWriteStream(spoolFile), { signal: options.signal })
      const { size } = await stat(spoolFile)
      await this.putSingleEntry(target, createReadStream(spoolFile), size, options)
    } finally {
      await rm(spoolDir, { recursive: true, force: true })
    }
  }

  private async putSingleEntry(
    target: ResolvedSandboxPath,
    body: Readable,
    size: number,
    options: { mode?: number; signal?: AbortSignal },
  ): Promise<void> {
    const pack = tar.pack()
    const now = new Date()
    const segments = target.relative.split('/')
    for (let depth = 1; depth < segments.length; depth++) {
      pack.entry({
        name: `${segments.slice(0, depth).join('/')}/`,
        type: 'directory',
        mode: 0o755,
        uid: this.owner.uid,
        gid: this.owner.gid,
        mtime: now,
      })
    }
    // Aborting the request (not just ending the tar stream) makes the engine
    // drop a half-written archive instead of waiting for the rest of it.
    const request = new AbortController()
    const onAbort = () => request.abort(options.signal?.reason)
    options.signal?.addEventListener('abort', onAbort, { once: true })
    const upload = this.container.putArchive(
      pack as unknown as NodeJS.ReadableStream,
      { path: target.root, abortSignal: request.signal } as {
        path: string
      },
    )
    upload.catch(() => {})
    const entry = pack.entry({
      name: target.relative,
      type: 'file',
      size,
      mode: options.mode ?? 0o644,
      uid: this.owner.uid,
      gid: this.owner.gid,
      mtime: now,
    })
    try {
      await pipeline(body, exactly(size), entry, { signal: options.signal })
      pack.finalize()
    } catch (error) {
      request.abort(error)
      pack.destroy(error as Error)
      throw new SandboxOperationError(
        'writeFile',
        `streaming ${target.path} failed: ${(error as Error).message}`,
        { cause: error },
      )
    } finally {
      options.signal?.removeEventListener('abort', onAbort)
    }
    await upload
  }

  /** Streams the bytes of one regular file. */
  async read(
    target: ResolvedSandboxPath,
    signal?: AbortSignal,
  ): Promise<AsyncIterable<Uint8Array>> {
    const archive = await this.getArchive(target.path, signal)
    if (!archive) throw new SandboxFileNotFoundError(target.path)
    const extract = tar.extract()
    const first = new Promise<{ header: tar.Headers; stream: Readable } | undefined>(
      (resolve, reject) => {
        extract.once('entry', (header, stream) => resolve({ header, stream }))
        extract.once('finish', () => resolve(undefined))
        extract.once('error', reject)
      },
    )
    archive.pipe(extract)
    const entry = await first
    const release = () => {
      extract.destroy()
      ;(archive as Readable).destroy?.()
    }
    if (!entry || entry.header.type !== 'file') {
      release()
      throw new SandboxFileNotFoundError(target.path)
    }
    return (async function* () {
      try {
        for await (const chunk of entry.stream) yield chunk as Uint8Array
      } finally {
        release()
      }
    })()
  }

  /** Every regular file under `dir`, recursively, read from tar headers (the bodies are skipped). */
  async list(dir: ResolvedSandboxPath, signal?: AbortSignal): Promise<SandboxFileEntry[]> {
    const archive = await this.getArchive(dir.path, signal)
    if (!archive) return []
    const parent = posix.dirname(dir.path)
    const entries: SandboxFileEntry[] = []
    const extract = tar.extract()
    extract.on('entry', (header, stream, next) => {
      if (header.type === 'file') {
        entries.push({
          path: posix.join(parent, header.name),
          size: header.size ?? 0,
          modifiedMs: header.mtime ? header.mtime.getTime() : 0,
        })
      }
      stream.on('end', next)
      stream.resume()
    })
    await pipeline(archive, extract, { signal })
    return entries
  }

  /**
   * Writes many in-memory files with one archive per mount root (so one engine
   * call, not one per file), adding each missing parent directory once, owned
   * by the sandbox user as `write` does.
   */
  async writeMany(
    files: ReadonlyArray<{ target: ResolvedSandboxPath; content: Uint8Array; mode?: number }>,
    signal?: AbortSignal,
  ): Promise<void> {
    const byRoot = new Map<string, typeof files>()
    for (const file of files) {
      if (file.target.relative === '')
        throw new SandboxOperationError('writeFiles', `${file.target.path} is a directory`)
      byRoot.set(file.target.root, [...(byRoot.get(file.target.root) ?? []), file])
    }
    const { uid, gid } = this.owner
    for (const [root, group] of byRoot) {
      const pack = tar.pack()
      const mtime = new Date()
      const directories = new Set<string>()
      for (const file of group) {
        const segments = file.target.relative.split('/')
        for (let depth = 1; depth < segments.length; depth++) {
          const directory = segments.slice(0, depth).join('/')
          if (directories.has(directory)) continue
          directories.add(directory)
          pack.entry({ name: `${directory}/`, type: 'directory', mode: 0o755, uid, gid, mtime })
        }
        const body = Buffer.from(
          file.content.buffer,
          file.content.byteOffset,
          file.content.byteLength,
        )
        pack.entry(
          {
            name: file.target.relative,
            type: 'file',
            size: body.byteLength,
            mode: file.mode ?? 0o644,
            uid,
            gid,
            mtime,
          },
          body,
        )
      }
      pack.finalize()
      await this.container.putArchive(
        pack as unknown as NodeJS.ReadableStream,
        { path: root, abortSignal: signal } as { path: string },
      )
    }
  }

  /**
   * Every regular file under `dir` with its bytes, from one archive. The next
   * tar entry is only parsed once the consumer has taken the previous file,
   * so one file at a time is held in memory.
   */
  async readMany(
    dir: ResolvedSandboxPath,
    signal?: AbortSignal,
  ): Promise<AsyncIterable<SandboxFileContent>> {
    const archive = await this.getArchive(dir.path, signal)
    if (!archive) return (async function* () {})()
    const parent = posix.dirname(dir.path)
    const extract = tar.extract()
    const ready: SandboxFileContent[] = []
    let continueExtract: (() => void) | undefined
    let finished = false
    let failure: unknown
    let waiting:
      | {
          resolve: (result: IteratorResult<SandboxFileContent>) => void
          reject: (error: unknown) => void
        }
      | undefined
    const settle = () => {
      if (!waiting) return
      const consumer = waiting
      if (ready.length > 0) {
        waiting = undefined
        consumer.resolve({ value: ready.shift()!, done: false })
        const next = continueExtract
        continueExtract = undefined
        next?.()
      } else if (failure !== undefined) {
        waiting = undefined
        consumer.reject(failure)
      } else if (finished) {
        waiting = undefined
        consumer.resolve({ value: undefined, done: true })
      }
    }
    extract.on('entry', (header, stream, next) => {
      const chunks: Buffer[] = []
      stream.on('data', (chunk: Buffer) => chunks.push(chunk))
      stream.on('end', () => {
        if (header.type !== 'file') return next()
        ready.push({ path: posix.join(parent, header.name), content: Buffer.concat(chunks) })
        continueExtract = next
        settle()
      })
    })
    extract.on('finish', () => {
      finished = true
      settle()
    })
    extract.on('error', (error) => {
      failure = error
      settle()
    })
    ;(archive as Readable).on('error', (error) => extract.destroy(error))
    archive.pipe(extract)
    const release = () => {
      extract.destroy()
      ;(archive as Readable).destroy?.()
    }
    return {
      [Symbol.asyncIterator]: () => ({
        next: () =>
          new Promise<IteratorResult<SandboxFileContent>>((resolve, reject) => {
            waiting = { resolve, reject }
            settle()
          }),
        return: async () => {
          release()
          return { value: undefined, done: true }
        },
      }),
    }
  }

  private async getArchive(
    path: string,
    signal?: AbortSignal,
  ): Promise<NodeJS.ReadableStream | undefined> {
    try {
      return await this.container.getArchive({ path, abortSignal: signal } as { path: string })
    } catch (error) {
      if (isNotFound(error)) return undefined
      throw error
    }
  }
}

/** Passes bytes through and fails unless exactly `size` of them arrive (a tar entry's size is fixed up front). */
function exactly(size: number): Transform {
  let seen = 0
  return new Transform({
    transform(chunk: Buffer, _encoding, callback) {
      seen += chunk.byteLength
      if (seen > size)
        callback(new Error(`the source delivered more than the declared ${size} bytes`))
      else callback(null, chunk)
    },
    flush(callback) {
      callback(
        seen === size
          ? null
          : new Error(`the source delivered ${seen} bytes, not the declared ${size}`),
      )
    },
  })
}

function toReadable(source: SandboxByteSource): Readable {
  if (typeof (source as ReadableStream<Uint8Array>).getReader === 'function') {
    return Readable.fromWeb(source as import('node:stream/web').ReadableStream<Uint8Array>)
  }
  return Readable.from(source as AsyncIterable<Uint8Array>)
}
