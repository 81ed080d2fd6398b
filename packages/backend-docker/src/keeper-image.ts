import { LABEL } from '@cordon/core/backend'
import type Docker from 'dockerode'
import { pack } from 'tar-stream'
import { isNotFound } from './engine-errors.js'
import { EngineStreamError, followEngineProgress } from './engine-progress-stream.js'

/** The image the huge-page Node's keeper runs from (huge-page-node.ts), one per engine. */
export const KEEPER_IMAGE = 'cordon-keeper:1'

/**
 * The keeper's image: a filesystem with one empty directory, imported from a
 * tar made here (no registry, no base image), labelled as cordon's runtime.
 * The keeper's only program is the static `cordon-launcher` from the runtime
 * volume, so it needs nothing from an image. It used to run from the image
 * of whichever provider first needed the runtime on the engine, and since it
 * lives for good it kept that image from being removed and carried its
 * labels (a test's own image, once: the run's leak check then found the
 * keeper).
 *
 * Two hosts may import at once: both tag the name, and the one whose image
 * lost the tag removes its own, so no untagged copy is left. Resolves with
 * the image's id, which a keeper is made from (the tag may move meanwhile).
 */
export async function ensureKeeperImage(docker: Docker): Promise<string> {
  const present = await imageId(docker)
  if (present) return present
  const archive = pack()
  archive.entry({ name: 'tmp/', type: 'directory', mode: 0o1777 })
  archive.finalize()
  const [repo, tag] = KEEPER_IMAGE.split(':') as [string, string]
  const progress = await docker.importImage(archive as unknown as NodeJS.ReadableStream, {
    repo,
    tag,
    changes: `LABEL ${LABEL.managed}=1 ${LABEL.role}=runtime`,
  })
  let imported: string | undefined
  await followEngineProgress(progress, (message) => {
    if (message.status?.startsWith('sha256:')) imported = message.status.trim()
  })
  const tagged = await imageId(docker)
  if (!tagged)
    throw new EngineStreamError(`the engine did not keep the imported image ${KEEPER_IMAGE}`)
  if (imported && imported !== tagged)
    await docker
      .getImage(imported)
      .remove()
      .catch(() => {})
  return tagged
}

async function imageId(docker: Docker): Promise<string | undefined> {
  try {
    return (await docker.getImage(KEEPER_IMAGE).inspect()).Id
  } catch (error) {
    if (isNotFound(error)) return undefined
    throw error
  }
}
