import { readdir } from 'node:fs/promises'
import { createRequire } from 'node:module'
import { join } from 'node:path'
import { createGunzip } from 'node:zlib'
import tar from 'tar-stream'

/**
 * dockerode's own packing of a context directory, `.dockerignore` applied as
 * `docker build` applies it: used as is, so that the context sent does not
 * depend on a second reading of the ignore file's rules.
 */
const dockerodeUtil = createRequire(import.meta.url)('dockerode/lib/util.js') as {
  prepareBuildContext(
    file: { context: string; src: string[] },
    next: (packed: NodeJS.ReadableStream) => void,
  ): void
}

/**
 * What of a build context directory goes to the engine, as paths relative
 * to it: every file and link, and every empty directory (a directory with
 * content is implied by it). Links are sent as links, never followed, so a
 * context cannot send what lies outside it. The `.dockerignore` is applied
 * to this list when the context is packed.
 */
export async function buildContextEntries(root: string): Promise<string[]> {
  const entries: string[] = []
  const walk = async (relative: string): Promise<void> => {
    const children = await readdir(join(root, relative), { withFileTypes: true })
    if (children.length === 0 && relative !== '') entries.push(relative)
    for (const child of children) {
      const path = relative === '' ? child.name : `${relative}/${child.name}`
      if (child.isDirectory()) await walk(path)
      else entries.push(path)
    }
  }
  await walk('')
  return entries.sort()
}

/**
 * The context as the engine gets it: packed the way dockerode packs a
 * context directory (the entries, less what `.dockerignore` excludes), with
 * the Dockerfile's entry holding `dockerfileContent` instead of the file's
 * bytes (build-stage-labels.ts). A Dockerfile the `.dockerignore` excludes
 * is still sent, as `docker build` sends it; the engine drops it from the
 * context after reading it.
 */
export function packBuildContext(
  root: string,
  entries: readonly string[],
  dockerfile: string,
  dockerfileContent: string,
): NodeJS.ReadableStream {
  const content = Buffer.from(dockerfileContent)
  const extract = tar.extract()
  const pack = tar.pack()
  let sent = false
  const fail = (error: Error): void => {
    pack.destroy(error)
  }
  extract.on('entry', (header, stream, next) => {
    if (header.name.replace(/^\.\//, '') !== dockerfile) {
      stream.pipe(pack.entry(header, next))
      return
    }
    sent = true
    stream.resume()
    stream.on('end', () =>
      pack.entry({ ...header, type: 'file', size: content.length }, content, next),
    )
  })
  extract.on('finish', () => {
    if (!sent) pack.entry({ name: dockerfile, size: content.length, mode: 0o644 }, content)
    pack.finalize()
  })
  extract.on('error', fail)
  dockerodeUtil.prepareBuildContext({ context: root, src: [...entries] }, (packed) => {
    const gunzip = createGunzip()
    gunzip.on('error', fail)
    packed.on('error', fail)
    packed.pipe(gunzip).pipe(extract)
  })
  return pack
}
