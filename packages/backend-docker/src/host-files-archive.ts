import { createReadStream, statSync } from 'node:fs'
import { dirname } from 'node:path'
import type Docker from 'dockerode'
import tar from 'tar-stream'

/** A file of this host to write into a container, or an empty one (a mark). */
export interface HostFile {
  /** Path under the target directory. */
  readonly name: string
  /** Where its bytes come from on this host; an empty file without one. */
  readonly source?: string
  readonly mode: number
}

/**
 * Writes host files into a container's directory through the engine's
 * archive API, in the order given (a mark written last says the rest is
 * whole), with the directories they need. Only for provisioning cordon's
 * own runtime (agent-runtime.ts, huge-page-node.ts): a sandbox's files go
 * through its agent.
 */
export async function putHostFiles(
  container: Docker.Container,
  directory: string,
  files: readonly HostFile[],
): Promise<void> {
  const pack = tar.pack()
  const writing = (async () => {
    const directories = new Set<string>()
    for (const file of files) {
      for (let dir = dirname(file.name); dir !== '.'; dir = dirname(dir)) directories.add(dir)
    }
    for (const dir of [...directories].sort()) {
      await new Promise<void>((resolve, reject) =>
        pack.entry({ name: dir, type: 'directory', mode: 0o755 }, (error) =>
          error ? reject(error) : resolve(),
        ),
      )
    }
    for (const file of files) {
      const source = file.source
      if (source === undefined) {
        pack.entry({ name: file.name, mode: file.mode }, '')
        continue
      }
      await new Promise<void>((resolve, reject) => {
        const entry = pack.entry(
          { name: file.name, size: statSync(source).size, mode: file.mode },
          (error) => (error ? reject(error) : resolve()),
        )
        createReadStream(source).on('error', reject).pipe(entry)
      })
    }
    pack.finalize()
  })()
  writing.catch((error: unknown) => pack.destroy(error as Error))
  await container.putArchive(pack, { path: directory })
  await writing
}
