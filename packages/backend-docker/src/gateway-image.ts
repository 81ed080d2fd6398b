import { createHash } from 'node:crypto'
import { readFile } from 'node:fs/promises'
import { createRequire } from 'node:module'
import type Docker from 'dockerode'
import tar from 'tar-stream'
import { isNotFound } from './engine-errors.js'

/** Where the bundled gateway program lives inside a gateway image. */
export const GATEWAY_PROGRAM_PATH = '/opt/cordon/cordon-egress-gateway.mjs'

/**
 * The Dockerfile cordon builds a gateway image from. The base image needs only
 * a `node` binary (Node 20 or newer); the gateway program is one bundled file.
 */
export function gatewayDockerfile(baseImage: string): string {
  return [
    `FROM ${baseImage}`,
    `COPY cordon-egress-gateway.mjs ${GATEWAY_PROGRAM_PATH}`,
    'USER 1000:1000',
    `ENTRYPOINT ["node", "${GATEWAY_PROGRAM_PATH}"]`,
    '',
  ].join('\n')
}

export interface BuildGatewayImageOptions {
  readonly docker: Docker
  /** An image with `node` on its PATH; it must already be on the engine (nothing is pulled). */
  readonly baseImage: string
  /** Tag for the result; default `cordon/egress-gateway:<content hash>`. */
  readonly tag?: string
}

/**
 * Builds (or finds, if one with the same content exists) the gateway image:
 * the base image plus `@cordon/egress`'s bundled gateway program. Returns the
 * tag to put in `gatewayImage`.
 */
export async function buildGatewayImage(options: BuildGatewayImageOptions): Promise<string> {
  const { docker, baseImage } = options
  const program = await readFile(
    createRequire(import.meta.url).resolve('@cordon/egress/cordon-egress-gateway.mjs'),
  )
  const dockerfile = gatewayDockerfile(baseImage)
  const base = await docker.getImage(baseImage).inspect()
  const digest = createHash('sha256')
    .update(program)
    .update(dockerfile)
    .update(base.Id)
    .digest('hex')
    .slice(0, 16)
  const tag = options.tag ?? `cordon/egress-gateway:${digest}`
  try {
    const existing = await docker.getImage(tag).inspect()
    if (existing.Config.Labels?.['cordon.gateway.digest'] === digest) return tag
  } catch (error) {
    if (!isNotFound(error)) throw error
  }
  const context = tar.pack()
  context.entry({ name: 'Dockerfile', mode: 0o644 }, dockerfile)
  context.entry({ name: 'cordon-egress-gateway.mjs', mode: 0o644 }, program)
  context.finalize()
  const stream = await docker.buildImage(
    context as unknown as NodeJS.ReadableStream,
    {
      t: tag,
      labels: { 'cordon.gateway.digest': digest },
      pull: false,
      rm: true,
      forcerm: true,
    } as Docker.ImageBuildOptions,
  )
  await new Promise<void>((resolve, reject) => {
    docker.modem.followProgress(
      stream,
      (error: Error | null, output: Array<{ error?: string }>) => {
        const failure = error ?? output.find((entry) => entry.error)?.error
        if (failure)
          reject(
            failure instanceof Error
              ? failure
              : new Error(`gateway image build failed: ${failure}`),
          )
        else resolve()
      },
    )
  })
  return tag
}
