import { readdir, readFile } from 'node:fs/promises'
import { join, relative } from 'node:path'
import dockerIgnore from '@balena/dockerignore'
import tarFs from 'tar-fs'
import tar from 'tar-stream'

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
  packContext(root, entries).then((packed) => {
    packed.on('error', fail)
    packed.pipe(extract)
  }, fail)
  return pack
}

/**
 * The entries packed as `docker build` packs a context directory: what the
 * root's `.dockerignore` excludes left out, by the same rules and library
 * (`@balena/dockerignore`, case-sensitive) that dockerode applies when it
 * packs one, links sent as links.
 */
async function packContext(root: string, entries: readonly string[]): Promise<tar.Pack> {
  let rules: string | undefined
  try {
    rules = await readFile(join(root, '.dockerignore'), 'utf8')
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code !== 'ENOENT') throw error
  }
  if (rules === undefined) return tarFs.pack(root, { entries: [...entries] })
  // A CommonJS module whose types name its export `default` (it sets both).
  const kept = dockerIgnore.default({ ignorecase: false }).add(rules).createFilter()
  return tarFs.pack(root, {
    entries: entries.filter(kept),
    // What tar-fs finds walking a directory entry (it names it by absolute path).
    ignore: (path) => !kept(relative(root, path)),
  })
}
