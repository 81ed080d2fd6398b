import { Transform, type Writable } from 'node:stream'
import tar from 'tar-stream'

/**
 * The host's check of a filesystem snapshot's tar on its way from the
 * capture (which runs inside the sandbox) into the snapshot's image. The
 * capture's output is the sandbox's to shape: a process of the sandbox's
 * user can stop the capture and write into its stdout (`/proc/<pid>/fd/1`),
 * and without this check that put a set-id `/etc/passwd`, owned by the
 * sandbox's uid, into the image every sandbox made from the snapshot runs
 * on. Each entry is re-written here, and only what the capture itself
 * makes passes:
 *
 * - a directory, regular file or symbolic link (no hard link, device node,
 *   FIFO or anything else);
 * - under `<prefix>/` (or one of the directories leading to it), named
 *   without `.`, `..` or empty parts, once, inside a directory this same
 *   tar made before (so never through a link); the capture writes the
 *   roots' contents, not the roots, so their directories under
 *   `<prefix>/files` are written here, by the host, once that is made;
 * - owned by root, its mode without set-id or sticky bits (the manifest
 *   keeps the real modes, which the restore applies as the new sandbox's
 *   user).
 *
 * And no more bytes than `limitBytes` (see `snapshotByteLimit`). Anything
 * else calls `onRefused` once, with the reason, and passes nothing more.
 */
export function checkedSnapshotArchive(
  prefix: string,
  roots: readonly string[],
  limitBytes: number,
  onRefused: (reason: string) => void,
): {
  /** Where the capture's tar is written. */
  readonly input: Writable
  /** The checked tar, for the engine. */
  readonly output: NodeJS.ReadableStream
  /** The bytes the capture wrote, as counted here. */
  streamedBytes(): number
  /** Why the tar was refused, once it was. */
  refusal(): string | undefined
} {
  const extract = tar.extract()
  const pack = tar.pack()
  let streamed = 0
  let refused: string | undefined
  const refuse = (reason: string): void => {
    if (refused !== undefined) return
    refused = reason
    onRefused(reason)
  }
  const input = new Transform({
    transform(chunk: Buffer, _encoding, done) {
      if (refused !== undefined) return done()
      streamed += chunk.length
      if (streamed > limitBytes) {
        refuse(
          `the sandbox's files came to more than ${limitBytes} bytes, twice the size of its tmpfs directories; a sparse file or a hard link is stored in full`,
        )
        return done()
      }
      done(null, chunk)
    },
  })
  input.pipe(extract)

  const prefixParts = prefix.split('/')
  const directories = new Set<string>()
  const seen = new Set<string>()
  const allowedName = (name: string): string | undefined => {
    const parts = name.replace(/\/$/, '').split('/')
    if (parts.some((part) => part === '' || part === '.' || part === '..')) return 'a bad name'
    // The directories leading to `<prefix>`, or something under it.
    const shared = Math.min(parts.length, prefixParts.length)
    if (!prefixParts.slice(0, shared).every((part, index) => parts[index] === part))
      return 'a name outside the snapshot'
    const parent = parts.slice(0, -1).join('/')
    if (parent !== '' && !directories.has(parent)) return 'a name outside a directory it made'
    const joined = parts.join('/')
    if (seen.has(joined)) return 'a name given twice'
    return undefined
  }

  extract.on('entry', (header, stream, next) => {
    if (refused !== undefined) return
    const name = header.name.replace(/\/$/, '')
    const wrong =
      allowedName(header.name) ??
      (header.type !== 'directory' && header.type !== 'file' && header.type !== 'symlink'
        ? `an entry of type ${header.type}`
        : name.split('/').length <= prefixParts.length && header.type !== 'directory'
          ? 'a file outside the snapshot'
          : undefined)
    if (wrong !== undefined) {
      refuse(`the capture's archive held ${wrong} (${JSON.stringify(header.name).slice(0, 200)})`)
      return
    }
    seen.add(name)
    if (header.type === 'directory') directories.add(name)
    if (header.type === 'directory' && name === `${prefix}/files`) {
      pack.entry({ name: header.name, type: 'directory', mode: 0o755, uid: 0, gid: 0 })
      for (const root of roots) {
        let path = name
        for (const part of root.split('/').filter((part) => part !== '')) {
          path = `${path}/${part}`
          if (seen.has(path)) continue
          seen.add(path)
          directories.add(path)
          pack.entry({ name: `${path}/`, type: 'directory', mode: 0o755, uid: 0, gid: 0 })
        }
      }
      stream.resume()
      stream.once('end', next)
      return
    }
    const checked: tar.Headers = {
      name: header.name,
      type: header.type,
      mode: (header.mode ?? 0o644) & 0o777,
      uid: 0,
      gid: 0,
      mtime: header.mtime ?? new Date(0),
      ...(header.type === 'file' ? { size: header.size ?? 0 } : {}),
      ...(header.type === 'symlink' ? { linkname: header.linkname ?? '' } : {}),
    }
    if (header.type !== 'file') {
      pack.entry(checked)
      stream.resume()
      stream.once('end', next)
      return
    }
    const sink = pack.entry(checked, (error) => {
      if (error) refuse(`the capture's archive could not be copied: ${error.message}`)
      else next()
    })
    stream.pipe(sink)
  })
  extract.once('finish', () => {
    if (refused === undefined) pack.finalize()
  })
  extract.once('error', (error: Error) => {
    refuse(`the capture's archive is not a well-formed tar: ${error.message}`)
  })
  return {
    input,
    output: pack,
    streamedBytes: () => streamed,
    refusal: () => refused,
  }
}
