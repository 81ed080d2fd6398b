import { createReadStream, statSync } from 'node:fs'
import { dirname } from 'node:path'
import type Docker from 'dockerode'
import tar from 'tar-stream'

/** A file of this host to write into a container. */
export interface HostFile {
  /** Path under the target directory. */
  readonly name: string
  /** Where its bytes come from on this host. */
  readonly source: string
  readonly mode: number
}

/**
 * Writes host files into a container's directory through the engine's
 * archive API, with the directories they need. Only for provisioning cordon's
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
      await new Promise<void>((resolve, reject) => {
        const entry = pack.entry(
          { name: file.name, size: statSync(file.source).size, mode: file.mode },
          (error) => (error ? reject(error) : resolve()),
        )
        createReadStream(file.source).on('error', reject).pipe(entry)
      })
    }
    pack.finalize()
  })()
  writing.catch((error: unknown) => pack.destroy(error as Error))
  await container.putArchive(pack, { path: directory })
  await writing
}
