/**
 * The tar plumbing a testcontainers user writes to copy into a container whose
 * root filesystem is read-only: its `copyFilesToContainer` and
 * `copyDirectoriesToContainer` always extract at `/`, which the engine refuses
 * there ("container rootfs is marked read-only"), so the archive goes through
 * `copyArchiveToContainer(tar, target)` with `target` inside the workspace
 * volume instead. The archive is streamed, never held in memory.
 */
import { createReadStream, createWriteStream } from 'node:fs'
import { mkdir } from 'node:fs/promises'
import { dirname, join } from 'node:path'
import type { Readable } from 'node:stream'
import { pipeline } from 'node:stream/promises'
import tar from 'tar-stream'
import { HostFileWriter } from './host-files.js'

export interface HostFile {
  /** Path on the host. */
  readonly source: string
  /** Path inside the archive (relative). */
  readonly name: string
  readonly size: number
}

/** A tar stream of `files`, each body streamed from disk in turn. */
export function packFiles(files: readonly HostFile[]): Readable {
  const pack = tar.pack()
  void (async () => {
    try {
      for (const file of files) {
        const entry = pack.entry({
          name: file.name,
          size: file.size,
          mode: 0o644,
          uid: 1000,
          gid: 1000,
          mtime: new Date(),
        })
        await pipeline(createReadStream(file.source), entry)
      }
      pack.finalize()
    } catch (error) {
      pack.destroy(error as Error)
    }
  })()
  return pack
}

/**
 * Extracts regular files from a tar stream below `targetDir`, dropping the
 * first `stripComponents` path segments; returns the number of files written.
 * Files up to 1 MiB are collected and written through a `HostFileWriter`
 * (one after another, synchronously); larger ones are streamed one by one.
 */
export async function extractFiles(
  archive: NodeJS.ReadableStream,
  targetDir: string,
  stripComponents: number,
): Promise<number> {
  const extract = tar.extract()
  const writer = new HostFileWriter()
  let streamed = 0
  extract.on('entry', (header, stream, next) => {
    const name = header.name.split('/').filter(Boolean).slice(stripComponents).join('/')
    if (header.type !== 'file' || name === '') {
      stream.on('end', () => next())
      stream.resume()
      return
    }
    const target = join(targetDir, name)
    if ((header.size ?? 0) > SMALL_FILE_BYTES) {
      mkdir(dirname(target), { recursive: true })
        .then(() => pipeline(stream, createWriteStream(target)))
        .then(() => {
          streamed += 1
          next()
        }, next)
      return
    }
    const chunks: Buffer[] = []
    stream.on('data', (chunk: Buffer) => chunks.push(chunk))
    stream.on('end', () => {
      writer.write(target, Buffer.concat(chunks)).then(() => next(), next)
    })
  })
  await pipeline(archive as Readable, extract)
  return streamed + (await writer.finish())
}

const SMALL_FILE_BYTES = 1024 * 1024
